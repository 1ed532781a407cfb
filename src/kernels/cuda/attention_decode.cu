// Split-K flash-decoding for one query token (T = 1) against the KV cache.
//
// Kernel 1, grid (Hkv, kMaxSplits), 4 warps: block (kvh, split) handles cache rows [k0, k1) of its split for
// all G = Hq/Hkv query heads of that KV head, so each K/V row is read once per step whatever G is. A lane
// owns D/32 consecutive dims; each warp walks every 4th row, two rows per iteration, with an online softmax
// per head; the 4 warps are merged in shared memory and the split writes (max, sum, unnormalised acc) to the
// workspace. Blocks past the device-computed split count return at once. Kernel 2, one block per query
// head, merges the splits (and, for gated attention, applies the sigmoid output gate).
#include "kernels/cuda/attention_impl.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fused_util.cuh"

namespace grimoire::cuda::attn {

namespace {
constexpr int kWarps = 4;
constexpr int kMaxG = 8;
constexpr int kRows = 2;  // K/V rows each warp scores per iteration (the code below is written for 2)

struct DecodeParams {
    const void* q;        // [Hq, D]
    const void* k_cache;  // [max_ctx, Hkv, D]
    const void* v_cache;  // [max_ctx, Hkv, D]
    float* ws;            // acc [Hq, kMaxSplits, D] then (max, sum) [Hq, kMaxSplits, 2]
    void* out;            // [Hq, D]
    int q_dt, o_dt, G;
    int64_t Hq, Hkv, D, n_past;
    const int* n_past_dev;
    float scale;
    const void* gate;  // null, or [Hq, gate_stride]: out = round(out) * sigmoid(gate) (gated attention)
    int gate_dt;
    int64_t gate_stride;
};

template <int EPL>
__device__ __forceinline__ void load_row(const __nv_bfloat16* p, float* f) {
    if constexpr (EPL == 8) {
        load_bf16x8(p, f);
    } else if constexpr (EPL == 4) {
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const float2 t = __bfloat1622float2(h[i]);
            f[2 * i] = t.x;
            f[2 * i + 1] = t.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < EPL; ++i) f[i] = __bfloat162float(p[i]);
    }
}
template <int EPL>
__device__ __forceinline__ void load_row(const float* p, float* f) {
#pragma unroll
    for (int i = 0; i < EPL; ++i) f[i] = p[i];
}

__device__ __forceinline__ int64_t current_len(const DecodeParams& p) {
    return (p.n_past_dev ? *p.n_past_dev : p.n_past) + 1;
}
}  // namespace

template <class CT, int EPL>
static __global__ void __launch_bounds__(32 * kWarps) decode_split_kernel(DecodeParams p) {
    __shared__ float sm_acc[kWarps][kMaxG][EPL * 32];
    __shared__ float sm_m[kWarps][kMaxG], sm_l[kWarps][kMaxG];
    __shared__ float sm_q[kMaxG][EPL * 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t kvh = blockIdx.x;
    const int split = blockIdx.y;
    const int64_t L = current_len(p);
    const int ns = num_splits(L);
    if (split >= ns) return;
    const int64_t per = (L + ns - 1) / ns;
    const int64_t k0 = split * per, k1 = k0 + per < L ? k0 + per : L;
    const int G = p.G;
    const int64_t D = p.D, row = p.Hkv * D;

    // The scaled query heads live in shared memory (each lane reads only its own EPL dims), which leaves the
    // registers to the accumulators and to kRows rows of K and V in flight per warp.
    if (warp == 0)
        for (int g = 0; g < G; ++g)
#pragma unroll
            for (int e = 0; e < EPL; ++e)
                sm_q[g][lane * EPL + e] = ld(p.q, p.q_dt, (kvh * G + g) * D + lane * EPL + e) * p.scale;
    __syncthreads();
    float acc[kMaxG][EPL], m[kMaxG], l[kMaxG];
#pragma unroll
    for (int g = 0; g < kMaxG; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[g][e] = 0.0f;
    }
    const CT* kc = static_cast<const CT*>(p.k_cache) + kvh * D + lane * EPL;
    const CT* vc = static_cast<const CT*>(p.v_cache) + kvh * D + lane * EPL;
    // A warp scores rows j and j + kWarps together while the next two are loading: the walk is latency-bound,
    // so the rows in flight per warp set its speed.
    constexpr int64_t kStep = kRows * kWarps;
    float kn[kRows][EPL], vn[kRows][EPL];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int64_t jr = k0 + warp + r * kWarps;
#pragma unroll
        for (int e = 0; e < EPL; ++e) kn[r][e] = vn[r][e] = 0.0f;
        if (jr < k1) {
            load_row<EPL>(kc + jr * row, kn[r]);
            load_row<EPL>(vc + jr * row, vn[r]);
        }
    }
    for (int64_t j = k0 + warp; j < k1; j += kStep) {
        float kr[kRows][EPL], vr[kRows][EPL];
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int e = 0; e < EPL; ++e) {
                kr[r][e] = kn[r][e];
                vr[r][e] = vn[r][e];
            }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const int64_t jn = j + kStep + r * kWarps;
            if (jn < k1) {
                load_row<EPL>(kc + jn * row, kn[r]);
                load_row<EPL>(vc + jn * row, vn[r]);
            }
        }
        const bool has1 = j + kWarps < k1;  // row j itself always exists
#pragma unroll
        for (int g = 0; g < kMaxG; ++g) {
            if (g < G) {
                float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
                for (int e = 0; e < EPL; ++e) {
                    const float qe = sm_q[g][lane * EPL + e];
                    s0 += qe * kr[0][e];
                    s1 += qe * kr[1][e];
                }
                s0 = warp_sum(s0);
                s1 = has1 ? warp_sum(s1) : -INFINITY;
                const float mn = fmaxf(m[g], fmaxf(s0, s1));
                const float corr = __expf(m[g] - mn), p0 = __expf(s0 - mn), p1 = __expf(s1 - mn);
                l[g] = l[g] * corr + p0 + p1;
#pragma unroll
                for (int e = 0; e < EPL; ++e) acc[g][e] = acc[g][e] * corr + p0 * vr[0][e] + p1 * vr[1][e];
                m[g] = mn;
            }
        }
    }
#pragma unroll
    for (int g = 0; g < kMaxG; ++g) {
        if (g < G) {
#pragma unroll
            for (int e = 0; e < EPL; ++e) sm_acc[warp][g][lane * EPL + e] = acc[g][e];
            if (lane == 0) {
                sm_m[warp][g] = m[g];
                sm_l[warp][g] = l[g];
            }
        }
    }
    __syncthreads();
    float* ws_acc = p.ws;
    float* ws_ml = p.ws + p.Hq * kMaxSplits * D;
    for (int g = 0; g < G; ++g) {
        float M = -INFINITY;
        for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm_m[w][g]);
        const int64_t h = kvh * G + g;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
            float v = 0.0f;
            for (int w = 0; w < kWarps; ++w)
                if (sm_m[w][g] != -INFINITY) v += __expf(sm_m[w][g] - M) * sm_acc[w][g][d];
            ws_acc[(h * kMaxSplits + split) * D + d] = v;
        }
        if (threadIdx.x == 0) {
            float Ls = 0.0f;
            for (int w = 0; w < kWarps; ++w)
                if (sm_m[w][g] != -INFINITY) Ls += __expf(sm_m[w][g] - M) * sm_l[w][g];
            ws_ml[(h * kMaxSplits + split) * 2] = M;
            ws_ml[(h * kMaxSplits + split) * 2 + 1] = Ls;
        }
    }
}

// One block of kCombineThreads per query head. The split weights exp(m_s - M) / sum are computed once into
// shared memory; then thread (d, group) sums every n_groups-th split of dim d, so a long context's 128 splits
// are read by several independent load streams instead of one serial walk per dim (the serial merge was a
// fifth of a 32K decode-attention call).
constexpr int kCombineThreads = 512;
static __global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(DecodeParams p) {
    __shared__ float wgt[kMaxSplits];
    __shared__ float part[kCombineThreads];
    __shared__ float red[32];
    const int64_t h = blockIdx.x, D = p.D;
    const int tid = threadIdx.x;
    const int ns = num_splits(current_len(p));
    const float* ws_acc = p.ws + h * kMaxSplits * D;
    const float* ws_ml = p.ws + p.Hq * kMaxSplits * D + h * kMaxSplits * 2;
    // Block max over the split maxima (kMaxSplits <= kCombineThreads: one split per thread).
    const float ms = tid < ns ? ws_ml[2 * tid] : -INFINITY;
    float M = warp_max(ms);
    if ((tid & 31) == 0) red[tid >> 5] = M;
    __syncthreads();
    M = red[0];
    for (int w = 1; w < kCombineThreads / 32; ++w) M = fmaxf(M, red[w]);
    const float e = tid < ns ? __expf(ms - M) : 0.0f;
    const float den = block_sum(tid < ns ? e * ws_ml[2 * tid + 1] : 0.0f, red);
    if (tid < ns) wgt[tid] = e / den;
    __syncthreads();
    const int groups = static_cast<int>(kCombineThreads / D);
    const int64_t d = tid % D;
    const int g = static_cast<int>(tid / D);
    float v = 0.0f;
    if (g < groups) {
#pragma unroll 8
        for (int s = g; s < ns; s += groups) v += wgt[s] * ws_acc[s * D + d];
    }
    part[tid] = v;
    __syncthreads();
    if (tid < D) {
        float o = 0.0f;
        for (int q = 0; q < groups; ++q) o += part[q * D + tid];
        if (p.gate) {
            const float gv = ld(p.gate, p.gate_dt, h * p.gate_stride + tid);
            o = round_as(p.o_dt, o) * sigmoidf_(gv);
        }
        st(p.out, p.o_dt, h * D + tid, o);
    }
}

template <class CT>
static void launch_decode_typed(const DecodeParams& p, cudaStream_t s) {
    dim3 grid(static_cast<unsigned>(p.Hkv), kMaxSplits);
    switch (p.D / 32) {
        case 1: decode_split_kernel<CT, 1><<<grid, 32 * kWarps, 0, s>>>(p); break;
        case 2: decode_split_kernel<CT, 2><<<grid, 32 * kWarps, 0, s>>>(p); break;
        case 4: decode_split_kernel<CT, 4><<<grid, 32 * kWarps, 0, s>>>(p); break;
        case 8: decode_split_kernel<CT, 8><<<grid, 32 * kWarps, 0, s>>>(p); break;
        default: throw Error("cuda attention: decode supports head_dim 32, 64, 128, 256");
    }
    check_launch("attention decode");
    decode_combine_kernel<<<static_cast<unsigned>(p.Hq), kCombineThreads, 0, s>>>(p);
    check_launch("attention decode combine");
}

void launch_decode(const void* q, int q_dt, const void* k_cache, const void* v_cache, int kv_dt, const Geometry& g,
                   int64_t n_past, const int* n_past_dev, float scale, float* ws, void* out, int o_dt,
                   cudaStream_t s, const void* gate, int gate_dt, int64_t gate_stride) {
    DecodeParams p{q, k_cache, v_cache, ws, out, q_dt, o_dt, static_cast<int>(g.Hq / g.Hkv), g.Hq, g.Hkv, g.D,
                   n_past, n_past_dev, scale, gate, gate_dt, gate_stride};
    if (kv_dt == kBF16) launch_decode_typed<__nv_bfloat16>(p, s);
    else launch_decode_typed<float>(p, s);
}

}  // namespace grimoire::cuda::attn
