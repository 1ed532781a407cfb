// Split-K flash-decoding for one query token (T = 1) against the KV cache.
//
// Kernel 1, grid (Hkv, kMaxSplits), 4 warps: block (kvh, split) handles cache rows [k0, k1) of its split for
// all G = Hq/Hkv query heads of that KV head, so each K/V row is read once per step whatever G is. A lane
// owns D/32 consecutive dims; each warp walks every 4th row with an online softmax per head, the 4 warps are
// merged in shared memory and the split writes (max, sum, unnormalised acc) to the workspace. Blocks past the
// device-computed split count return at once. Kernel 2, one block per query head, merges the splits.
#include "kernels/cuda/attention_impl.h"
#include "kernels/cuda/common.cuh"

namespace grimoire::cuda::attn {

namespace {
constexpr int kWarps = 4;
constexpr int kMaxG = 8;

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

    float qr[kMaxG][EPL], acc[kMaxG][EPL], m[kMaxG], l[kMaxG];
#pragma unroll
    for (int g = 0; g < kMaxG; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) {
            acc[g][e] = 0.0f;
            qr[g][e] = g < G ? ld(p.q, p.q_dt, (kvh * G + g) * D + lane * EPL + e) * p.scale : 0.0f;
        }
    }
    const CT* kc = static_cast<const CT*>(p.k_cache) + kvh * D + lane * EPL;
    const CT* vc = static_cast<const CT*>(p.v_cache) + kvh * D + lane * EPL;
    // One row of prefetch: the next row's loads are in flight while this one is scored.
    float kn[EPL], vn[EPL];
    if (k0 + warp < k1) {
        load_row<EPL>(kc + (k0 + warp) * row, kn);
        load_row<EPL>(vc + (k0 + warp) * row, vn);
    }
    for (int64_t j = k0 + warp; j < k1; j += kWarps) {
        float kr[EPL], vr[EPL];
#pragma unroll
        for (int e = 0; e < EPL; ++e) {
            kr[e] = kn[e];
            vr[e] = vn[e];
        }
        if (j + kWarps < k1) {
            load_row<EPL>(kc + (j + kWarps) * row, kn);
            load_row<EPL>(vc + (j + kWarps) * row, vn);
        }
#pragma unroll
        for (int g = 0; g < kMaxG; ++g) {
            if (g < G) {
                float sc = 0.0f;
#pragma unroll
                for (int e = 0; e < EPL; ++e) sc += qr[g][e] * kr[e];
                sc = warp_sum(sc);
                const float mn = fmaxf(m[g], sc);
                const float corr = __expf(m[g] - mn), pj = __expf(sc - mn);
                l[g] = l[g] * corr + pj;
#pragma unroll
                for (int e = 0; e < EPL; ++e) acc[g][e] = acc[g][e] * corr + pj * vr[e];
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

static __global__ void decode_combine_kernel(DecodeParams p) {
    const int64_t h = blockIdx.x, D = p.D;
    const int ns = num_splits(current_len(p));
    const float* ws_acc = p.ws + h * kMaxSplits * D;
    const float* ws_ml = p.ws + p.Hq * kMaxSplits * D + h * kMaxSplits * 2;
    float M = -INFINITY;
    for (int s = 0; s < ns; ++s) M = fmaxf(M, ws_ml[2 * s]);
    float den = 0.0f;
    for (int s = 0; s < ns; ++s) den += __expf(ws_ml[2 * s] - M) * ws_ml[2 * s + 1];
    const float inv = 1.0f / den;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < ns; ++s) v += __expf(ws_ml[2 * s] - M) * ws_acc[s * D + d];
        st(p.out, p.o_dt, h * D + d, v * inv);
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
    decode_combine_kernel<<<static_cast<unsigned>(p.Hq), 128, 0, s>>>(p);
    check_launch("attention decode combine");
}

void launch_decode(const void* q, int q_dt, const void* k_cache, const void* v_cache, int kv_dt, const Geometry& g,
                   int64_t n_past, const int* n_past_dev, float scale, float* ws, void* out, int o_dt,
                   cudaStream_t s) {
    DecodeParams p{q, k_cache, v_cache, ws, out, q_dt, o_dt, static_cast<int>(g.Hq / g.Hkv), g.Hq, g.Hkv, g.D,
                   n_past, n_past_dev, scale};
    if (kv_dt == kBF16) launch_decode_typed<__nv_bfloat16>(p, s);
    else launch_decode_typed<float>(p, s);
}

}  // namespace grimoire::cuda::attn
