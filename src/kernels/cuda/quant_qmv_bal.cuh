// One to sixteen rows of an INT4 weight with g128 scale groups or an FP8 weight with 128 x 128 scale blocks,
// its warps spread evenly over the SMs: the balanced form of quant_qmv.cuh's blocks, for weights of up to ~24
// n-tiles per SM (27B down_proj and o_proj: 320 n-tiles on 132 SMs; the DeltaNet q | k | v | z: 1024).
//
// Why: the one-tile form is a block of 8 warps per n-tile, each warp a contiguous eighth of K. With 320
// blocks on 132 SMs, 56 SMs hold three blocks and 76 hold two; the kernel ends when the three-block SMs do
// (H200 timeline, docs/BENCHMARKS.md session 20: down's two-block SMs exit at 12.5-13.3 us, the three-block
// ones at 16.5); at 9..16 rows the two-tile blocks are 160 on 132 SMs. Here the work is (n-tile, part of K)
// units, E = Args::kparts parts per n-tile (8 on down: the same per-warp work as the one-tile blocks), each
// one warp's job with the same chunk loop, and block b of nb (one per SM) takes the units [b U / nb, (b + 1)
// U / nb) of U = E NT, so every SM runs within one unit of the same number of warps (19 or 20 on down). A
// block's warps span several n-tiles; an n-tile whose parts fall in two blocks (at most two: a block has at
// least E units) is summed from the two blocks' partials by the later one to arrive on its counter, left
// part first (deterministic; the counter resets itself).
//
// Per chunk the work is quant_qmv.cuh's: weights straight to registers D chunks ahead (issued before the
// programmatic-launch wait); B fragments of x staged in shared memory (one row) or read from x (2..16 rows);
// INT4: A fragments 128 + q, the group's x sums from an all-ones mma, (128 + z) times them subtracted and
// the scale applied at the group's end; FP8: quant_mma.cuh's exact A fragment, the block's f32 scale applied
// at its end.
#pragma once

#include "kernels/cuda/qmv_bal_plan.h"
#include "kernels/cuda/quant_qmv.cuh"

namespace grimoire::cuda::qmm {

// The weight's parts of K per n-tile (qmv_bal_plan.h), 0 where it does not take this kernel; FP8 needs its
// scale grid (bn > 0), glu an even n-tile count.
inline int qmv_bal_parts(const Args& a, bool fp8, int nb, int max_warps, bool glu = false) {
    if ((fp8 && a.bn <= 0) || (glu && a.NT % 2 != 0)) return 0;
    return qmv_bal::parts(a.M, a.gs, a.G, a.KC, glu ? a.NT / 2 : a.NT, nb, max_warps);
}
// Workspace: partials [NT][2][M][16] f32 (GLU: [NT / 2][2][M][32]) and counters [NT] (zeroed once; they reset
// themselves).

// FP8: E4M3 weights, f32 scales [SN][SG] of 128 x 128 blocks. ASYM (INT4): zero points (else z = 8). SSZ:
// bytes per scale (2: F16 / BF16 by a.sdt, 4: f32). D: chunks in flight per warp (even). MAXW: most warps per
// block; BPS: blocks per SM the registers must allow. NH: 0 one row, x staged in shared memory (dynamic: KC x
// 64 BF16); 1 / 2: 2..8 / 9..16 rows, token r in column r % 8 of B operand r / 8, read straight from x (whole
// chunks: ldx a multiple of 64) through L1, as quant_qmv.cuh's MULTI form. GLU: a stacked [gate; up] weight
// whose output is h = silu(g) * u (quant.h QmmParts::glu): a unit is the pair (gate n-tile p, up n-tile p +
// NT / 2) over its part of K, so a warp carries two n-tiles and the block's sums hold both halves of h's 16
// columns.
// XW (one row): each warp stages only its own part of x and starts after a __syncwarp, instead of the block
// staging all of x behind a barrier (warps of the same part write the same bytes: benign); a benchmark
// variant.
template <bool FP8,
          bool ASYM,
          int SSZ,
          int D,
          int MAXW,
          int BPS,
          int NH = 0,
          bool GLU = false,
          bool XW = false>
__global__ void __launch_bounds__(32 * MAXW, BPS) qmv_bal_kernel(const Args a) {
    static_assert(D % 2 == 0, "g128: the flushes fall on odd slots");
    constexpr int VEC = FP8 ? 2 : 1;     // uint4 per lane per chunk (quant_mma.cuh vec)
    constexpr int RT = NH ? 8 * NH : 1;  // token rows kept per warp for the block's sum
    constexpr int NB = NH ? NH : 1;      // B operands of 8 tokens
    constexpr int NC =
        NH ? 4 * NH : 2;  // accumulators per lane (one row: C's columns are equal, keep c0 / c2)
    // INT4, 9..16 rows: the k-tile's two B fragments are x's own A fragment (rows = the 16 tokens), so one
    // mma with an all-ones B sums every token (quant_qmv.cuh XT); else one all-ones-A mma per B operand.
    constexpr bool XT = !FP8 && NH == 2;
    constexpr int NTW = GLU ? 2 : 1;  // n-tiles per warp
    extern __shared__ __align__(16) uint4 smem_u4[];
    __shared__ float red[MAXW][RT][16 * NTW];
    __shared__ int last_arrival[2];
    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int NU = GLU ? a.NT / 2 : a.NT;  // n-tiles (GLU: gate / up pairs) the units run over
    const int E = a.kparts, units = NU * E, nb = static_cast<int>(gridDim.x),
              b = static_cast<int>(blockIdx.x);
    const int u0 = qmv_bal::first_unit(b, units, nb), u1 = qmv_bal::first_unit(b + 1, units, nb);
    const int u = u0 + warp;
    const bool active = u < u1;
    const int nt = (active ? u : u0) / E, e = u - nt * E, KC = a.KC;
    const int c0 = active ? qmv_bal::part_chunk(e, E, KC) : 0,
              c1 = active ? qmv_bal::part_chunk(e + 1, E, KC) : 0;

    const uint4* wp[NTW];
    const int64_t wstride = static_cast<int64_t>(a.NT) * 32 * VEC;
    using ST = std::conditional_t<SSZ == 4, unsigned, unsigned short>;
    const ST* sbase = static_cast<const ST*>(a.scales);
    // Element offsets of rows g / g + 8 of tile j in a group's scales: INT4 [G][NP]; FP8 [SN][SG] (group =
    // column). Rows past N are read, never stored.
    int so_lo[NTW], so_hi[NTW];
#pragma unroll
    for (int j = 0; j < NTW; ++j) {
        const int tj = nt + j * NU;
        wp[j] = reinterpret_cast<const uint4*>(a.words) + (tile_index(tj, c0, a.NT, KC) * 32 + lane) * VEC;
        const int row_lo = min(tj * 16 + g, a.N - 1), row_hi = min(tj * 16 + g + 8, a.N - 1);
        so_lo[j] = FP8 ? row_lo / a.bn * a.SG : row_lo, so_hi[j] = FP8 ? row_hi / a.bn * a.SG : row_hi;
    }
    uint4 wq[D][NTW][VEC];
    uint32_t slo[D][NTW], shi[D][NTW], zr[D][NTW];
    int lc = c0;
    // Chunk lc into slot s; a group's last (odd) chunk brings the group's scales (and zero points).
    auto load = [&](int s) {
        if (lc >= c1) return;
        const int64_t gb = static_cast<int64_t>(lc >> 1) * (FP8 ? 1 : a.NP);
#pragma unroll
        for (int j = 0; j < NTW; ++j) {
#pragma unroll
            for (int v = 0; v < VEC; ++v) wq[s][j][v] = ld_stream(wp[j] + v);
            wp[j] += wstride;
            if (lc & 1) {
                slo[s][j] = __ldg(sbase + gb + so_lo[j]), shi[s][j] = __ldg(sbase + gb + so_hi[j]);
                if constexpr (ASYM)
                    zr[s][j] = __ldg(a.zeros + gb + so_lo[j]) | (__ldg(a.zeros + gb + so_hi[j]) << 8);
            }
        }
        ++lc;
    };
#pragma unroll
    for (int s = 0; s < D; ++s) load(s);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");  // x comes from the previous kernel
#endif
    // The lane's B words of chunk c for operand h: x channels 64 c + 16 t .. + 15 of token g + 8 h (one row:
    // all of x staged first, zeros past ldx; a block's warps cover every part of K, E <= its units).
    const uint4* xl[NB];
    bool row_ok[NB];
    if constexpr (NH == 0) {
        const int p0 = XW ? c0 * 8 + lane : static_cast<int>(threadIdx.x), p1 = XW ? c1 * 8 : KC * 8;
        const int pstep = XW ? 32 : static_cast<int>(blockDim.x);
        for (int p = p0; p < p1; p += pstep) {
            const bool full = p * 8 < a.ldx;
            cp_async16z(smem_u4 + p, a.x + (full ? static_cast<int64_t>(p) * 8 : 0), full);
        }
        cp_async_commit();
        cp_async_wait<0>();
        if constexpr (XW)
            __syncwarp();
        else
            __syncthreads();
        xl[0] = smem_u4 + t * 2, row_ok[0] = true;
    } else {
#pragma unroll
        for (int h = 0; h < NB; ++h) {
            row_ok[h] = g + 8 * h < a.M;
            xl[h] = reinterpret_cast<const uint4*>(a.x +
                                                   static_cast<int64_t>(row_ok[h] ? g + 8 * h : 0) * a.ldx) +
                    t * 2;
        }
    }

    // cur: the group's sums (C fragments, 4 per B operand); xs[h][0 / 1]: the group's x sums of the lane's
    // tokens 8 h + 2 t, + 1 (one row: [0][0]); xt: the XT mma's C fragment; acc: the scaled sums.
    float cur[NTW][4 * NB], xs[NB][4], xt[4], acc[NTW][NC];
#pragma unroll
    for (int j = 0; j < NTW; ++j)
#pragma unroll
        for (int i = 0; i < NC; ++i) acc[j][i] = 0.0f;
    auto chunk = [&](int s, int c, bool first) {
        uint32_t b0[NB][4], b1[NB][4];
#pragma unroll
        for (int h = 0; h < NB; ++h) {
            uint4 xu = make_uint4(0u, 0u, 0u, 0u), xv = xu;
            if constexpr (NH == 0) {
                xu = xl[0][c * 8], xv = xl[0][c * 8 + 1];
            } else if (row_ok[h]) {
                xu = __ldg(xl[h] + c * 8), xv = __ldg(xl[h] + c * 8 + 1);
            }
            b0[h][0] = xu.x, b1[h][0] = xu.y, b0[h][1] = xu.z, b1[h][1] = xu.w;
            b0[h][2] = xv.x, b1[h][2] = xv.y, b0[h][3] = xv.z, b1[h][3] = xv.w;
        }
        if constexpr (!FP8) qmv_chunk_xsums<XT>(b0, b1, first, xt, xs);
#pragma unroll
        for (int j = 0; j < NTW; ++j)
#pragma unroll
            for (int kt = 0; kt < 4; ++kt) {
                uint32_t a0, a1, a2, a3;
                if constexpr (FP8)
                    a_fragment<true>(wq[s][j], kt, 0u, 0u, a0, a1, a2, a3);
                else
                    a_fragment_int4_raw(wq[s][j][0], kt, a0, a1, a2, a3);
#pragma unroll
                for (int h = 0; h < NB; ++h) {
                    if (first && kt == 0)
                        mma_bf16_first(cur[j] + 4 * h, a0, a1, a2, a3, b0[h][kt], b1[h][kt]);
                    else
                        mma_bf16(cur[j] + 4 * h, a0, a1, a2, a3, b0[h][kt], b1[h][kt]);
                }
            }
    };
    // The group's sums less (128 + z) times its x sums (INT4), times its scales: C entry i of operand h is
    // row g (i < 2) or g + 8 of token 8 h + 2 t + (i & 1).
    auto flush = [&](int s) {
        if constexpr (XT) qmv_xt_sums(xt, t, xs);
#pragma unroll
        for (int j = 0; j < NTW; ++j) {
            const float sl = qmv_scale<SSZ>(slo[s][j], a.sdt), sh = qmv_scale<SSZ>(shi[s][j], a.sdt);
            float zl = 136.0f, zh = 136.0f;  // 128 + z, symmetric z = 8
            if constexpr (ASYM)
                zl = 128.0f + static_cast<float>(zr[s][j] & 0xFFu),
                zh = 128.0f + static_cast<float>(zr[s][j] >> 8);
            if constexpr (NH == 0) {
                float vl = cur[j][0], vh = cur[j][2];
                if constexpr (!FP8) vl = fmaf(-zl, xs[0][0], vl), vh = fmaf(-zh, xs[0][0], vh);
                acc[j][0] = fmaf(vl, sl, acc[j][0]), acc[j][1] = fmaf(vh, sh, acc[j][1]);
            } else {
#pragma unroll
                for (int i = 0; i < NC; ++i) {
                    float v = cur[j][i];
                    if constexpr (!FP8) v = fmaf(-((i & 2) ? zh : zl), xs[i >> 2][i & 1], v);
                    acc[j][i] = fmaf(v, (i & 2) ? sh : sl, acc[j][i]);
                }
            }
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
    if (active) {
#pragma unroll
        for (int j = 0; j < NTW; ++j) {
            if constexpr (NH == 0) {
                if (t == 0) red[warp][0][16 * j + g] = acc[j][0], red[warp][0][16 * j + g + 8] = acc[j][1];
            } else {
#pragma unroll
                for (int i = 0; i < NC; ++i) {
                    const int tok = 8 * (i >> 2) + 2 * t + (i & 1);
                    if (tok < a.M) red[warp][tok][16 * j + g + ((i >> 1) & 1) * 8] = acc[j][i];
                }
            }
        }
    }
    __syncthreads();
    // The block's units' n-tiles (GLU: pairs) ft..lt, each [M][16] outputs (GLU: gate and up, [M][32]) summed
    // over its warps in warp order; the first and last may be split with the neighbouring blocks: partials
    // [NU][2][M][16 NTW], the right part (later parts of K) at 1.
    constexpr int W16 = 16 * NTW;
    const int ft = u0 / E, lt = (u1 - 1) / E, M = NH ? a.M : 1, per_tile = M * 16;
    auto is_split = [&](int T) { return qmv_bal::split(T, E, u0, u1); };
    auto tile_sum = [&](int T, int tok, int col) {
        const int w0 = max(T * E, u0) - u0, w1 = min(T * E + E, u1) - u0;
        float sum = 0.0f;
        for (int w = w0; w < w1; ++w) sum += red[w][tok][col];
        return sum;
    };
    auto part = [&](int T, int side, int tok, int col) {
        return a.partials + ((static_cast<int64_t>(T) * 2 + side) * M + tok) * W16 + col;
    };
    // Output column T * 16 + r of row tok (GLU: h = silu(g) * u, g and u rounded as their stored parts would
    // be).
    auto emit = [&](int T, int tok, int r, const float(&v)[NTW]) {
        if constexpr (GLU) {
            if (T * 16 + r >= NU * 16) return;
            const float gq = round_as(a.ydt, v[0]), uq = round_as(a.ydt, v[NTW - 1]);
            st(a.parts.data[0], a.ydt, static_cast<int64_t>(tok) * (NU * 16) + T * 16 + r,
               gq * sigmoidf_(gq) * uq);
        } else {
            if (T * 16 + r < a.N) store_y(a, tok, T * 16 + r, v[0]);
        }
    };
    bool any_split = false;
    for (int i = static_cast<int>(threadIdx.x); i < (lt - ft + 1) * per_tile;
         i += static_cast<int>(blockDim.x)) {
        const int T = ft + i / per_tile, tok = (i % per_tile) >> 4, r = i & 15;
        float v[NTW];
#pragma unroll
        for (int j = 0; j < NTW; ++j) v[j] = tile_sum(T, tok, 16 * j + r);
        if (!is_split(T)) {
            emit(T, tok, r, v);
        } else {
#pragma unroll
            for (int j = 0; j < NTW; ++j) *part(T, T * E < u0 ? 1 : 0, tok, 16 * j + r) = v[j];
            any_split = true;
        }
    }
    if (any_split) __threadfence();
    __syncthreads();
    if (threadIdx.x < 2) {  // thread 0: the first n-tile, 1: the last (if split and distinct)
        const int Ts = threadIdx.x == 0 ? ft : lt;
        const bool sp = threadIdx.x == 0 ? is_split(ft) : lt != ft && is_split(lt);
        int v = 0;
        if (sp) {
            v = atomicAdd(a.counters + Ts, 1);
            if (v == 1) a.counters[Ts] = 0;
        }
        last_arrival[threadIdx.x] = sp && v == 1;
    }
    __syncthreads();
    for (int k = 0; k < 2; ++k) {
        const int T = k == 0 ? ft : lt;
        if (!last_arrival[k] || (k == 1 && lt == ft)) continue;
        const int side = T * E < u0 ? 1 : 0;
        for (int i = static_cast<int>(threadIdx.x); i < per_tile; i += static_cast<int>(blockDim.x)) {
            const int tok = i >> 4, r = i & 15;
            float v[NTW];
#pragma unroll
            for (int j = 0; j < NTW; ++j) {
                const float mine = tile_sum(T, tok, 16 * j + r),
                            other = __ldcg(part(T, side ^ 1, tok, 16 * j + r));
                v[j] = side == 0 ? mine + other : other + mine;
            }
            emit(T, tok, r, v);
        }
    }
}

}  // namespace grimoire::cuda::qmm
