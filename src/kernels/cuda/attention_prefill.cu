// Flash-style causal GQA attention for several query tokens (prefill, T > 1), fp32 online softmax.
//
// Block = (16-query tile, query head), 4 warps of 4 queries each. Key/value tiles of 32 cache rows are staged
// in shared memory as fp32 (K rows padded by one float so lane j reading row j is conflict-free); lane j
// scores key j against the warp's 4 queries, the softmax statistics are warp reductions, and for P·V each
// lane owns dims lane, lane+32, ... of the output. Only tiles up to the last visible row are visited.
#include "kernels/cuda/attention_impl.h"
#include "kernels/cuda/common.cuh"

namespace grimoire::cuda::attn {

namespace {
constexpr int kQ = 16;      // queries per block
constexpr int kKeys = 32;   // cache rows per tile
constexpr int kWarps = 4;
constexpr int kQPerWarp = kQ / kWarps;

struct PrefillParams {
    const void* q;        // [T, Hq, D]
    const void* k_cache;  // [max_ctx, Hkv, D]
    const void* v_cache;
    void* out;            // [T, Hq, D]
    int q_dt, kv_dt, o_dt, G;
    int64_t T, Hq, Hkv, D, n_past;
    const int* n_past_dev;
    float scale;
};

size_t prefill_smem(int64_t D) { return static_cast<size_t>(kQ * D + kKeys * (D + 1) + kKeys * D) * sizeof(float); }
}  // namespace

template <int EPL>
static __global__ void __launch_bounds__(32 * kWarps) prefill_kernel(PrefillParams p) {
    constexpr int D = EPL * 32;
    extern __shared__ float smem[];
    float* q_s = smem;                    // [kQ][D]
    float* k_s = q_s + kQ * D;            // [kKeys][D + 1]
    float* v_s = k_s + kKeys * (D + 1);   // [kKeys][D]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t h = blockIdx.y, kvh = h / p.G;
    const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kQ;
    const int64_t n_past = p.n_past_dev ? *p.n_past_dev : p.n_past;
    const int64_t t_last = (t0 + kQ < p.T ? t0 + kQ : p.T) - 1;
    const int64_t kend = n_past + t_last + 1;  // rows [0, kend) are visible to some query of the block

    for (int i = threadIdx.x; i < kQ * D; i += blockDim.x) {
        const int64_t t = t0 + i / D;
        q_s[i] = t < p.T ? ld(p.q, p.q_dt, (t * p.Hq + h) * D + i % D) * p.scale : 0.0f;
    }
    float m[kQPerWarp], l[kQPerWarp], acc[kQPerWarp][EPL];
#pragma unroll
    for (int r = 0; r < kQPerWarp; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[r][e] = 0.0f;
    }
    const int64_t row = p.Hkv * D;
    for (int64_t kt = 0; kt < kend; kt += kKeys) {
        __syncthreads();  // previous tile fully consumed (and q_s written, on the first pass)
        for (int i = threadIdx.x; i < kKeys * D; i += blockDim.x) {
            const int jj = i / D, d = i % D;
            const int64_t j = kt + jj;
            const bool ok = j < kend;
            k_s[jj * (D + 1) + d] = ok ? ld(p.k_cache, p.kv_dt, j * row + kvh * D + d) : 0.0f;
            v_s[jj * D + d] = ok ? ld(p.v_cache, p.kv_dt, j * row + kvh * D + d) : 0.0f;
        }
        __syncthreads();
        float sc[kQPerWarp];
#pragma unroll
        for (int r = 0; r < kQPerWarp; ++r) sc[r] = 0.0f;
        const float* kr = k_s + lane * (D + 1);
        const float* qb = q_s + (warp * kQPerWarp) * D;
        for (int d = 0; d < D; ++d) {
            const float kv = kr[d];
#pragma unroll
            for (int r = 0; r < kQPerWarp; ++r) sc[r] += qb[r * D + d] * kv;
        }
        const int64_t j = kt + lane;
#pragma unroll
        for (int r = 0; r < kQPerWarp; ++r) {
            const int64_t t = t0 + warp * kQPerWarp + r;
            if (t >= p.T) continue;  // warp-uniform
            const bool vis = j <= n_past + t;
            const float s = vis ? sc[r] : -INFINITY;
            const float mt = warp_max(s);
            const float mn = fmaxf(m[r], mt);
            if (mn == -INFINITY) continue;  // nothing visible yet (cannot happen: row 0 is in the first tile)
            const float corr = __expf(m[r] - mn);
            const float pj = vis ? __expf(s - mn) : 0.0f;
            l[r] = l[r] * corr + warp_sum(pj);
            m[r] = mn;
#pragma unroll
            for (int e = 0; e < EPL; ++e) acc[r][e] *= corr;
            for (int jj = 0; jj < kKeys; ++jj) {
                const float w = __shfl_sync(0xffffffffu, pj, jj);
#pragma unroll
                for (int e = 0; e < EPL; ++e) acc[r][e] += w * v_s[jj * D + lane + 32 * e];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < kQPerWarp; ++r) {
        const int64_t t = t0 + warp * kQPerWarp + r;
        if (t >= p.T) continue;
        const float inv = 1.0f / l[r];
#pragma unroll
        for (int e = 0; e < EPL; ++e) st(p.out, p.o_dt, (t * p.Hq + h) * D + lane + 32 * e, acc[r][e] * inv);
    }
}

template <int EPL>
static void launch_prefill_d(const PrefillParams& p, cudaStream_t s) {
    const size_t smem = prefill_smem(EPL * 32);
    static bool configured = false;  // the attribute is per function; setting it once per process is enough
    if (!configured) {
        cudaFuncSetAttribute(prefill_kernel<EPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        configured = true;
    }
    dim3 grid(static_cast<unsigned>((p.T + kQ - 1) / kQ), static_cast<unsigned>(p.Hq));
    prefill_kernel<EPL><<<grid, 32 * kWarps, smem, s>>>(p);
}

void launch_prefill(const void* q, int q_dt, const void* k_cache, const void* v_cache, int kv_dt,
                    const Geometry& g, int64_t n_past, const int* n_past_dev, float scale, void* out, int o_dt,
                    cudaStream_t s) {
    PrefillParams p{q, k_cache, v_cache, out, q_dt, kv_dt, o_dt, static_cast<int>(g.Hq / g.Hkv), g.T, g.Hq, g.Hkv,
                    g.D, n_past, n_past_dev, scale};
    switch (g.D / 32) {
        case 1: launch_prefill_d<1>(p, s); break;
        case 2: launch_prefill_d<2>(p, s); break;
        case 4: launch_prefill_d<4>(p, s); break;
        case 8: launch_prefill_d<8>(p, s); break;
        default: throw Error("cuda attention: prefill supports head_dim 32, 64, 128, 256");
    }
    check_launch("attention prefill");
}

}  // namespace grimoire::cuda::attn
