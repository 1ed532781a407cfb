// One row (single-user decode) of an INT4 weight with g128 scale groups or an FP8 weight with 128 x 128 scale
// blocks, its warps spread evenly over the SMs: the balanced form of quant_qmv.cuh's one-row blocks, for
// weights of up to ~24 n-tiles per SM (27B down_proj and o_proj: 320 n-tiles on 132 SMs; the DeltaNet q | k |
// v | z: 1024).
//
// Why: the one-tile form is a block of 8 warps per n-tile, each warp a contiguous eighth of K. With 320
// blocks on 132 SMs, 56 SMs hold three blocks and 76 hold two; the kernel ends when the three-block SMs do
// (H200 timeline, docs/BENCHMARKS.md session 20: down's two-block SMs exit at 12.5-13.3 us, the three-block
// ones at 16.5). Here the work is (n-tile, part of K) units, E = Args::kparts parts per n-tile (8 on down:
// the same per-warp work as the one-tile blocks), each one warp's job with the same chunk loop, and block b
// of nb (one per SM) takes the units [b U / nb, (b + 1) U / nb) of U = E NT, so every SM runs within one unit
// of the same number of warps (19 or 20 on down). A block's warps span several n-tiles; an n-tile whose parts
// fall in two blocks (at most two: a block has at least E units) is summed from the two blocks' partials by
// the later one to arrive on its counter, left part first (deterministic; the counter resets itself).
//
// Per chunk the work is quant_qmv.cuh's one-row path: weights straight to registers D chunks ahead (issued
// before the programmatic-launch wait), B fragments of x staged in shared memory; INT4 (MSUM): A fragments
// 128 + q, the group's x sum from the all-ones mma, (128 + z) times it subtracted and the scale applied at
// the group's end; FP8: quant_mma.cuh's exact A fragment, the block's f32 scale applied at its end.
#pragma once

#include "kernels/cuda/quant_qmv.cuh"

namespace grimoire::cuda::qmm {

// The first unit of block b of nb over `units` (n-tile, part of K) units.
__host__ __device__ inline int qmv_bal_first(int b, int units, int nb) {
    return static_cast<int>(static_cast<int64_t>(b) * units / nb);
}
// Chunk c0 of part e of E over KC chunks: whole groups of two chunks.
__host__ __device__ inline int qmv_bal_chunk(int e, int E, int KC) {
    return e >= E ? KC : (e * KC / E) & ~1;
}
// The parts of K per n-tile for nb blocks of at most max_warps warps, 0 where the weight does not take the
// balanced form: one row, g128 groups (FP8: 128 x 128 blocks), an even number of chunks, at least one group
// per part and at least E units per block (an n-tile spans at most two blocks). The most parts (up to 8) that
// fit.
inline int qmv_bal_parts(const Args& a, bool fp8, int nb, int max_warps) {
    if (a.M != 1 || a.gs != 128 || a.G <= 1 || (fp8 && a.bn <= 0) || a.KC % 2 != 0) return 0;
    for (int E = 8; E >= 1; --E) {
        const int units = a.NT * E;
        if (a.KC / E >= 2 && units / nb >= E && (units + nb - 1) / nb <= max_warps) return E;
    }
    return 0;
}
// Workspace: partials [NT][2][16] f32 and counters [NT] (zeroed once; they reset themselves).

// FP8: E4M3 weights, f32 scales [SN][SG] of 128 x 128 blocks. ASYM (INT4): zero points (else z = 8). SSZ:
// bytes per scale (2: F16 / BF16 by a.sdt, 4: f32). D: chunks in flight per warp (even). MAXW: most warps per
// block; BPS: blocks per SM the registers must allow. Dynamic shared memory: x, KC x 64 BF16.
template <bool FP8, bool ASYM, int SSZ, int D, int MAXW, int BPS>
__global__ void __launch_bounds__(32 * MAXW, BPS) qmv_bal_kernel(const Args a) {
    static_assert(D % 2 == 0, "g128: the flushes fall on odd slots");
    constexpr int VEC = FP8 ? 2 : 1;  // uint4 per lane per chunk (quant_mma.cuh vec)
    extern __shared__ __align__(16) uint4 smem_u4[];
    __shared__ float red[MAXW][16];
    __shared__ int last_arrival[2];
    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int E = a.kparts, units = a.NT * E, nb = static_cast<int>(gridDim.x),
              b = static_cast<int>(blockIdx.x);
    const int u0 = qmv_bal_first(b, units, nb), u1 = qmv_bal_first(b + 1, units, nb);
    const int u = u0 + warp;
    const bool active = u < u1;
    const int nt = (active ? u : u0) / E, e = u - nt * E, KC = a.KC;
    const int c0 = active ? qmv_bal_chunk(e, E, KC) : 0, c1 = active ? qmv_bal_chunk(e + 1, E, KC) : 0;

    const uint4* wp =
        reinterpret_cast<const uint4*>(a.words) + (tile_index(nt, c0, a.NT, KC) * 32 + lane) * VEC;
    const int64_t wstride = static_cast<int64_t>(a.NT) * 32 * VEC;
    using ST = std::conditional_t<SSZ == 4, unsigned, unsigned short>;
    const ST* sbase = static_cast<const ST*>(a.scales);
    const int row_lo = min(nt * 16 + g, a.N - 1),
              row_hi = min(nt * 16 + g + 8, a.N - 1);  // past N: not stored
    // Element offsets of rows g / g + 8 in a group's scales: INT4 [G][NP]; FP8 [SN][SG] (group = column).
    const int so_lo = FP8 ? row_lo / a.bn * a.SG : row_lo, so_hi = FP8 ? row_hi / a.bn * a.SG : row_hi;
    uint4 wq[D][VEC];
    uint32_t slo[D], shi[D], zr[D];
    int lc = c0;
    // Chunk lc into slot s; a group's last (odd) chunk brings the group's scales (and zero points).
    auto load = [&](int s) {
        if (lc >= c1) return;
#pragma unroll
        for (int v = 0; v < VEC; ++v) wq[s][v] = ld_stream(wp + v);
        wp += wstride;
        if (lc & 1) {
            const int64_t gb = static_cast<int64_t>(lc >> 1) * (FP8 ? 1 : a.NP);
            slo[s] = __ldg(sbase + gb + so_lo), shi[s] = __ldg(sbase + gb + so_hi);
            if constexpr (ASYM) zr[s] = __ldg(a.zeros + gb + so_lo) | (__ldg(a.zeros + gb + so_hi) << 8);
        }
        ++lc;
    };
#pragma unroll
    for (int s = 0; s < D; ++s) load(s);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");  // x comes from the previous kernel
#endif
    // x, all of it (a block's warps cover every part of K, E <= its units), zeros past ldx.
    for (int p = static_cast<int>(threadIdx.x); p < KC * 8; p += static_cast<int>(blockDim.x)) {
        const bool full = p * 8 < a.ldx;
        cp_async16z(smem_u4 + p, a.x + (full ? static_cast<int64_t>(p) * 8 : 0), full);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    const uint4* xl = smem_u4 + t * 2;       // lane t's B words of chunk c: x channels 64 c + 16 t .. + 15
    constexpr uint32_t kOnes = 0x3F803F80u;  // BF16x2 of 1.0
    float cur[4], xs[4], acc0 = 0.0f, acc1 = 0.0f;
    auto chunk = [&](int s, int c, bool first) {
        const uint4 xu = xl[c * 8], xv = xl[c * 8 + 1];
        const uint32_t b0[4] = {xu.x, xu.z, xv.x, xv.z}, b1[4] = {xu.y, xu.w, xv.y, xv.w};
        if constexpr (!FP8) {
#pragma unroll
            for (int kt = 0; kt < 4; ++kt) {
                if (first && kt == 0)
                    mma_bf16_first(xs, kOnes, kOnes, kOnes, kOnes, b0[kt], b1[kt]);
                else
                    mma_bf16(xs, kOnes, kOnes, kOnes, kOnes, b0[kt], b1[kt]);
            }
        }
#pragma unroll
        for (int kt = 0; kt < 4; ++kt) {
            uint32_t a0, a1, a2, a3;
            if constexpr (FP8)
                a_fragment<true>(wq[s], kt, 0u, 0u, a0, a1, a2, a3);
            else
                a_fragment_int4_raw(wq[s][0], kt, a0, a1, a2, a3);
            if (first && kt == 0)
                mma_bf16_first(cur, a0, a1, a2, a3, b0[kt], b1[kt]);
            else
                mma_bf16(cur, a0, a1, a2, a3, b0[kt], b1[kt]);
        }
    };
    // The group's sums less (128 + z) times its x sum, times its scales (rows g / g + 8: cur[0] / cur[2]).
    auto flush = [&](int s) {
        const float sl = qmv_scale<SSZ>(slo[s], a.sdt), sh = qmv_scale<SSZ>(shi[s], a.sdt);
        if constexpr (FP8) {
            acc0 = fmaf(cur[0], sl, acc0), acc1 = fmaf(cur[2], sh, acc1);
        } else {
            float zl = 136.0f, zh = 136.0f;
            if constexpr (ASYM)
                zl = 128.0f + static_cast<float>(zr[s] & 0xFFu), zh = 128.0f + static_cast<float>(zr[s] >> 8);
            acc0 = fmaf(fmaf(-zl, xs[0], cur[0]), sl, acc0);
            acc1 = fmaf(fmaf(-zh, xs[0], cur[2]), sh, acc1);
        }
    };
    for (int cb = c0; cb < c1; cb += D) {
#pragma unroll
        for (int s = 0; s < D; ++s) {
            const int c = cb + s;
            if (s % 2 == 0 && c >= c1) break;  // the range ends on a group boundary
            chunk(s, c, s % 2 == 0);
            if (s % 2 == 1) flush(s);
            load(s);
        }
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    if (active && t == 0) red[warp][g] = acc0, red[warp][g + 8] = acc1;
    __syncthreads();
    // The block's n-tiles ft..lt; the first and last may be split with the neighbouring blocks.
    const int ft = u0 / E, lt = (u1 - 1) / E;
    const int i = static_cast<int>(threadIdx.x), T = ft + (i >> 4), r = i & 15;
    const bool mine = T <= lt;
    float sum = 0.0f;
    bool split = false;
    int side = 0;
    if (mine) {
        const int w0 = max(T * E, u0) - u0, w1 = min(T * E + E, u1) - u0;
        for (int w = w0; w < w1; ++w) sum += red[w][r];
        split = T * E < u0 || T * E + E > u1;
        side = T * E < u0 ? 1 : 0;  // the block holding the n-tile's later parts is the right one
        if (!split) {
            if (T * 16 + r < a.N) store_y(a, 0, T * 16 + r, sum);
        } else {
            a.partials[(T * 2 + side) * 16 + r] = sum;
            __threadfence();
        }
    }
    __syncthreads();
    if (threadIdx.x < 2) {  // thread 0: the first n-tile, 1: the last (if split and distinct)
        const int Ts = threadIdx.x == 0 ? ft : lt;
        const bool sp =
            threadIdx.x == 0 ? ft * E < u0 || (ft == lt && ft * E + E > u1) : lt != ft && lt * E + E > u1;
        int v = 0;
        if (sp) {
            v = atomicAdd(a.counters + Ts, 1);
            if (v == 1) a.counters[Ts] = 0;
        }
        last_arrival[threadIdx.x] = sp && v == 1;
    }
    __syncthreads();
    if (mine && split && last_arrival[T == ft ? 0 : 1]) {
        const float other = __ldcg(a.partials + (T * 2 + (side ^ 1)) * 16 + r);
        const float v = side == 0 ? sum + other : other + sum;
        if (T * 16 + r < a.N) store_y(a, 0, T * 16 + r, v);
    }
}

}  // namespace grimoire::cuda::qmm
