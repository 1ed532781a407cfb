// One row (single-user decode) of an INT4 weight whose scale groups are one or two 64-channel chunks (g64 /
// g128), as a warp-granular stream-K kernel: every warp of a one-wave grid takes an equal contiguous range of
// the weight's (n-tile, scale group) units, in n-tile-major order, and runs it as one independent pipeline.
//
// A benchmark variant (bench/gpu/bench_qmv_variants.cu `sk_*`), not launched by qmm.cu: measured slower than
// quant_qmv.cuh's blocks on every 27B shape (H200, docs/BENCHMARKS.md session 13: gate_up 33.2 against 27.6
// us, down 22.2 / 16.4, o_proj 12.8 / 7.7, lm_head 178.7 / 164.2), so the question below is answered: the
// per-n-tile fixup (fence, atomic arrival, the partial sums) costs more than the per-block costs it replaces.
//
// Why (docs/BENCHMARKS.md, sessions 8-12): quant_qmv.cuh's one-row kernel, a block per one or two n-tiles
// over all of K, loses a near-constant 4-6 us per launch over its copy-limited time whatever the weight's
// size, while its own loads alone (same grid, same addresses) run at about the copy rate; ablating the
// dequant, the mma, the x loads and the flush together still left gate_up 1.3x over its loads. What remains
// is per block: x staged again by every block (gate_up: 1088 blocks), the block-wide barrier and reduction,
// and the ramp of each block's pipeline (a warp takes only K / 8 channels: 10 chunks on gate_up, 12 on
// o_proj), with blocks in two or three uneven waves. Here a block stages x once (only the channels its warps
// need), each warp then streams ~40 chunks (gate_up) without a barrier, and the grid is one wave of equal
// work. The price is a fixup for the n-tiles split between warps: the warp stores its 16 partial sums, the
// last to arrive on the n-tile's counter (atomic, self-resetting) adds the parts in warp order
// (deterministic) and stores y.
//
// Per chunk the work is quant_qmv.cuh's one-row ZF path: the weights (16 bytes per lane, the tile layout of
// quant/tile_layout.h) straight to registers D chunks ahead, issued before the programmatic-launch wait; A
// fragments 128 + q (one lop3 per two weights); B fragments x from shared memory in all eight columns; the
// zero point subtracted once per group, sum_k (q_k - z) x_k = sum_k (128 + q_k) x_k - (128 + z) sum_k x_k,
// with the chunk sums of the BF16 x computed while staging; the group scale applied in fp32. A warp's range
// may start or end inside an n-tile but always on a group boundary (units are whole groups), so every flush
// sees whole groups.
#pragma once

#include "kernels/cuda/quant_qmv.cuh"

namespace grimoire::cuda::qmm {

// Units (n-tile, scale group) of the launch, and the first unit of warp w of nw.
__host__ __device__ inline int qmv_sk_units(const Args& a, int cpg) {
    return a.NT * (a.KC / cpg);
}
__host__ __device__ inline int qmv_sk_start(int w, int units, int nw) {
    return static_cast<int>(static_cast<int64_t>(w) * units / nw);
}

// Shared memory: x [KC][64] BF16 and its chunk sums [KC] f32 (the staged-x layout of quant_qmv.cuh).
inline size_t qmv_sk_smem(const Args& a) {
    return qmv_smem(a, true);
}

// ASYM: zero points (else z = 8). SSZ: bytes per scale (2: F16 / BF16 by a.sdt, 4: f32). CPG: chunks per
// scale group (1: g64, 2: g128). D: chunks in flight per warp (a multiple of CPG). MINB: blocks per SM the
// registers must allow (the grid is at most SMs x MINB). Needs: a.M == 1, a.KC % CPG == 0, at least D / CPG
// units per warp (qmv_sk_units / warps: every range non-empty and at most one n-tile end per D chunks),
// partials of 2 x 16 f32 per warp and a zeroed counter per n-tile.
template <bool ASYM, int SSZ, int CPG, int D, int MINB>
__global__ void __launch_bounds__(kQmvThreads, MINB) qmv_sk_kernel(const Args a) {
    static_assert(D % CPG == 0, "the flushes fall on fixed slots");
    constexpr int DU = D / CPG;  // units per pass over the slots
    extern __shared__ __align__(16) uint4 smem_u4[];
    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int KC = a.KC, NT = a.NT, GK = KC / CPG;
    const int units = NT * GK, nw = static_cast<int>(gridDim.x) * kQmvWarps;
    const int w = static_cast<int>(blockIdx.x) * kQmvWarps + warp;
    const int u0 = qmv_sk_start(w, units, nw), u1 = qmv_sk_start(w + 1, units, nw);

    // Load cursor: unit (lnt, lgk); the lane's weight pointer moves one chunk row of tiles per chunk
    // (chunk-major tiles) and jumps to chunk 0 of the next n-tile after its last group. Registers are what
    // bounds the chunks in flight, so the cursor is small: the unit index of a load is implied by the pass,
    // the scale index is 32-bit (G x NP < 2^31: qmm.cu) and two 2-byte scales share a register.
    using ST = std::conditional_t<SSZ == 4, unsigned, unsigned short>;
    const ST* sbase = static_cast<const ST*>(a.scales);
    const uint4* wb = reinterpret_cast<const uint4*>(a.words);
    const int64_t wstride = static_cast<int64_t>(NT) * 32;  // uint4 per chunk row
    int lnt = u0 / GK, lgk = u0 - (u0 / GK) * GK;
    const uint4* wp = wb + (tile_index(lnt, static_cast<int64_t>(lgk) * CPG, NT, KC) * 32 + lane);
    int sgo = lgk * a.NP, rlo = 0, rhi = 0;  // group row offset; the lane's rows g / g + 8 of n-tile lnt
    auto set_rows = [&]() {
        const int nt = min(lnt, NT - 1);  // rows past N are never stored: clamped to a valid one
        rlo = min(nt * 16 + g, a.N - 1), rhi = min(nt * 16 + g + 8, a.N - 1);
    };
    set_rows();
    constexpr int SR = SSZ == 4 ? 2 : 1;  // registers per group's two scales
    uint4 wq[D];
    uint32_t sr[DU][SR],
        zr[ASYM ? DU : 1];  // the group's raw scale bits (and zero points), with its last chunk
    // Slot s's chunk of unit `base` + s / CPG (base: the unit of slot 0 in this pass), if the range has it.
    auto load = [&](int s, int base) {
        if (base + s / CPG >= u1) return;
        wq[s] = ld_stream(wp);
        if (s % CPG == CPG - 1) {
            const uint32_t lo = __ldg(sbase + sgo + rlo), hi = __ldg(sbase + sgo + rhi);
            if constexpr (SSZ == 4)
                sr[s / CPG][0] = lo, sr[s / CPG][1] = hi;
            else
                sr[s / CPG][0] = lo | (hi << 16);
            if constexpr (ASYM) zr[s / CPG] = __ldg(a.zeros + sgo + rlo) | (__ldg(a.zeros + sgo + rhi) << 8);
            sgo += a.NP;
            if (++lgk == GK) {
                lgk = 0, ++lnt, sgo = 0;
                wp = wb + (static_cast<int64_t>(lnt) * 32 + lane);  // tile_index(lnt, 0)
                set_rows();
                return;
            }
        }
        wp += wstride;
    };
#pragma unroll
    for (int s = 0; s < D; ++s) load(s, u0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");  // x comes from the previous kernel
#endif

    // x: the chunks this block's warps read (a circular range of K when the block's units lie in one n-tile
    // or span two, else all of K), by cp.async, zeros past ldx; then each chunk's sum of the BF16 values the
    // mma reads (a thread sums the pieces it copied: lanes 8i .. 8i + 7 hold one chunk).
    float* xsum_sm =
        reinterpret_cast<float*>(reinterpret_cast<char*>(smem_u4) + static_cast<size_t>(KC) * 128);
    {
        const int b0 = qmv_sk_start(static_cast<int>(blockIdx.x) * kQmvWarps, units, nw);
        const int b1 = qmv_sk_start(static_cast<int>(blockIdx.x + 1) * kQmvWarps, units, nw);
        const int nch = b1 - b0 >= GK ? KC : (b1 - b0) * CPG;
        const int q0 = b1 - b0 >= GK ? 0 : (b0 % GK) * CPG * 8, np = nch * 8, nq = KC * 8;
        const int tid = static_cast<int>(threadIdx.x);
        for (int p = tid; p < np; p += kQmvThreads) {
            const int q = q0 + p < nq ? q0 + p : q0 + p - nq;
            const bool full = q * 8 < a.ldx;
            cp_async16z(smem_u4 + q, a.x + (full ? static_cast<int64_t>(q) * 8 : 0), full);
        }
        cp_async_commit();
        cp_async_wait<0>();
        for (int pb = 0; pb < np; pb += kQmvThreads) {
            const int p = pb + tid;
            const bool in = p < np;
            const int q = q0 + p < nq ? q0 + p : q0 + p - nq;
            const uint4 v = in ? smem_u4[q] : make_uint4(0u, 0u, 0u, 0u);
            float sum = bf16x2_sum(v.x) + bf16x2_sum(v.y) + (bf16x2_sum(v.z) + bf16x2_sum(v.w));
            sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
            sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
            sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 4);
            if (in && (lane & 7) == 0) xsum_sm[q >> 3] = sum;
        }
        __syncthreads();
    }
    auto to_f = [&](uint32_t bits) { return qmv_scale<SSZ>(bits, a.sdt); };

    // The n-tile's sums of this warp's segment: y when the warp had the whole n-tile, else its partial
    // (slot 0: the first n-tile of its range, 1: the last) and the arrival; the last to arrive sums the
    // parts of warps wf..wl in warp order and resets the counter for the next launch.
    auto emit = [&](int nt, bool whole, int slot, float v0, float v1) {
        if (whole) {
            if (t == 0) {
                const int n = nt * 16 + g;
                if (n < a.N) store_y(a, 0, n, v0);
                if (n + 8 < a.N) store_y(a, 0, n + 8, v1);
            }
            return;
        }
        float* part = a.partials + (static_cast<int64_t>(w) * 2 + slot) * 16;
        if (t == 0) part[g] = v0, part[g + 8] = v1;
        __syncwarp();
        const int wf = block_of(nt * GK, units, nw), wl = block_of(nt * GK + GK - 1, units, nw);
        int last = 0;
        if (lane == 0) {
            __threadfence();
            last = atomicAdd(a.counters + nt, 1) == wl - wf;
        }
        if (!__shfl_sync(0xFFFFFFFFu, last, 0)) return;
        __threadfence();
        if (lane < 16) {
            const int s0 =
                qmv_sk_start(wf, units, nw) < nt * GK ? 1 : 0;  // warp wf: its last n-tile or first
            float sum = __ldcg(a.partials + (static_cast<int64_t>(wf) * 2 + s0) * 16 + lane);
#pragma unroll 4
            for (int v = wf + 1; v <= wl; ++v)
                sum += __ldcg(a.partials + static_cast<int64_t>(v) * 32 + lane);
            const int n = nt * 16 + lane;
            if (n < a.N) store_y(a, 0, n, sum);
        }
        if (lane == 0) a.counters[nt] = 0;
    };

    const uint4* xl = smem_u4 + t * 2;  // the lane's 16 channels of chunk 0 (chunk-permuted weights)
    int cnt = u0 / GK, cgk = u0 - (u0 / GK) * GK;  // compute cursor
    bool seg_first = true,
         seg_whole = cgk == 0;  // the current n-tile's segment: first of the range, from group 0
    float acc0 = 0.0f, acc1 = 0.0f, cur[4] = {0.0f, 0.0f, 0.0f, 0.0f}, xs = 0.0f;
    for (int ub = u0; ub < u1; ub += DU) {
#pragma unroll
        for (int s = 0; s < D; ++s) {
            const int u = ub + s / CPG;
            if (s % CPG == 0 && u >= u1) break;
            const int c = cgk * CPG + s % CPG;
            const bool first = s % CPG == 0;
            const uint4 xu = xl[c * 8], xv = xl[c * 8 + 1];
            const uint32_t b0[4] = {xu.x, xu.z, xv.x, xv.z}, b1[4] = {xu.y, xu.w, xv.y, xv.w};
            const float xsv = xsum_sm[c];
            xs = first ? xsv : xs + xsv;
#pragma unroll
            for (int kt = 0; kt < 4; ++kt) {
                uint32_t a0, a1, a2, a3;
                a_fragment_int4_raw(wq[s], kt, a0, a1, a2, a3);
                if (first && kt == 0)
                    mma_bf16_first(cur, a0, a1, a2, a3, b0[kt], b1[kt]);
                else
                    mma_bf16(cur, a0, a1, a2, a3, b0[kt], b1[kt]);
            }
            if (s % CPG == CPG - 1) {  // the group's flush
                const int k = s / CPG;
                float zl = 136.0f, zh = 136.0f;  // 128 + z, symmetric z = 8
                if constexpr (ASYM) {
                    zl = 128.0f + static_cast<float>(zr[k] & 0xFFu),
                    zh = 128.0f + static_cast<float>(zr[k] >> 8);
                }
                const float sl = to_f(SSZ == 4 ? sr[k][0] : sr[k][0] & 0xFFFFu);
                const float sh = to_f(SSZ == 4 ? sr[k][SR - 1] : sr[k][0] >> 16);
                acc0 = fmaf(fmaf(-zl, xs, cur[0]), sl, acc0);
                acc1 = fmaf(fmaf(-zh, xs, cur[2]), sh, acc1);
                const bool tile_end = cgk == GK - 1, range_end = u + 1 == u1;
                if (tile_end || range_end) {
                    if (range_end) {  // the next launch may start while this warp emits its last n-tile
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                        asm volatile("griddepcontrol.launch_dependents;");
#endif
                    }
                    emit(cnt, seg_whole && tile_end, seg_first ? 0 : 1, acc0, acc1);
                    acc0 = acc1 = 0.0f, seg_first = false, seg_whole = true;
                }
                if (tile_end)
                    cgk = 0, ++cnt;
                else
                    ++cgk;
            }
            load(s, ub + DU);
        }
    }
}

}  // namespace grimoire::cuda::qmm
