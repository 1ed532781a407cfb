// The quantized-weight x activations kernel for one to sixteen rows (single-user decode, a few users' decode
// steps, the 2..16-token verify of speculative decoding), instantiated by qmm.cu for weights whose scale
// groups are whole 64-channel chunks (GK = 0 in quant_mma.cuh's terms).
//
// Why a separate kernel: the M = 1..16 kernels (quant_mma.cuh, quant_mma_tma.cuh) pay, per launch, for a
// shared-memory pipeline (x and scale copies per warp and chunk, ring bookkeeping) and for a stream-K
// reduction across grid blocks (partials, fence, atomic arrival, the last block summing the parts). Measured
// on the H200 (docs/BENCHMARKS.md, session 7): with the weight loads, the dequant and the mma all removed,
// the cp.async kernel still took 18 us on gate_up and 11.7 us on o_proj at M = 1; the copy limit for their
// weights is 21 us and 3.7 us. This kernel keeps only what a few rows need:
//   * A block owns NTB n-tiles (16 output features each) over all of K; its 8 warps each take a contiguous
//     eighth of the 64-channel chunks, and the block sums the 8 partials through shared memory in warp order
//     (deterministic, no workspace, no counters, no cross-block arrival). The hardware block scheduler
//     balances the thousands of small blocks over the SMs.
//   * Weights go straight from HBM to registers (16 bytes per lane per tile and chunk, the tile layout of
//     quant/tile_layout.h), DEPTH chunks in flight per warp, issued before the programmatic-launch wait so
//     they overlap the previous kernel's tail. The group's scales ride with its last chunk's weights as raw
//     bits. The per-chunk integer work is a few pointer adds (ncu on the first version: address and
//     group-index arithmetic doubled the instruction count per weight word and the kernel was issue-bound).
//   * The weights are chunk-permuted (quant/tile_layout.h chunk_channel: every weight this kernel takes has
//     scale groups of whole chunks), so lane t's B operand of a chunk is x's natural channels 16t .. 16t + 15:
//     two 16-byte loads of x as the previous kernel wrote it, no reordering pass.
//   * One row: x is copied once per warp, only its channel range, into shared memory, and the B fragment of
//     every k-tile holds that x in all 8 columns, so every lane's accumulator holds the result for its rows g
//     and g + 8. Two to sixteen rows (MULTI): token r in column r % 8 of B operand r / 8, read straight from
//     x through L1.
//   * FP8: the dequant is quant_mma.cuh's a_fragment (exact). INT4: the A fragment is 128 + q as BF16 (one
//     lop3 per two weights, exact) and the zero point is subtracted after the multiply, once per group and
//     token: sum_k (q_k - z) x_k = sum_k (128 + q_k) x_k - (128 + z) sum_k x_k, with sum_k x_k the group's
//     sum of the BF16 x the mma reads (one more mma per k-tile with an all-ones A, whose C columns are the
//     tokens' sums; one row as qmm.cu launches it (kQmvMmaSum) too, else chunk sums computed while staging
//     x, which session 13 measured 4-5% slower on every 27B shape). That drops the per-weight BF16
//     subtract (4 of the 11 instructions per 8 weights; the kernel is issue-bound: docs/BENCHMARKS.md session
//     9). The cancellation costs about 5 bits of the fp32 sum (|128 + q| against |q - z|), far inside the BF16
//     output's 8. The group scale is applied in fp32 to each group's corrected sum.
#pragma once

#include "kernels/cuda/fused_util.cuh"
#include "kernels/cuda/quant_mma.cuh"
#include "kernels/cuda/quant_qmv_xsums.cuh"

namespace grimoire::cuda::qmm {

constexpr int kQmvWarps = 8;
constexpr int kQmvThreads = 32 * kQmvWarps;
constexpr int kQmvMaxM = 16;  // rows

// Dynamic shared memory of the staged-x form (!MULTI, one row): x for every chunk (BF16, K rounded up to 64),
// then the f32 sums of x over each chunk (16-byte aligned, so the scale table after it is); none for MULTI.
// The launcher allows kQmvMaxSmem (K up to ~100k channels); a longer row takes the M <= 16 kernels.
constexpr size_t kQmvMaxSmem = 200 * 1024;
__host__ __device__ inline size_t qmv_smem(const Args& a, bool staged_x) {
    return staged_x ? static_cast<size_t>(a.KC) * 64 * 2 + (static_cast<size_t>(a.KC) * 4 + 15) / 16 * 16 : 0;
}
// Chunks per scale group (one group: all of K) and the groups along K.
__host__ __device__ inline int qmv_cpg(const Args& a) {
    return a.G <= 1 ? a.KC : max(1, a.gs / 64);
}
__host__ __device__ inline int qmv_groups(const Args& a) {
    return (a.KC + qmv_cpg(a) - 1) / qmv_cpg(a);
}
// With SSM (scales staged): after x, the block's scales as f32 [groups][NTB * 16] and, asymmetric, 128 + z
// [groups][NTB * 16] (f32; BF16x2 with kQmvSubZ).
__host__ __device__ inline size_t qmv_smem_ssm(const Args& a, int ntb, bool asym, bool staged_x) {
    return qmv_smem(a, staged_x) + static_cast<size_t>(qmv_groups(a)) * ntb * 16 * 4 * (asym ? 2 : 1);
}
// WSM (weights through shared memory): after the above (16-byte aligned), each warp's ring of `depth` chunk
// slots, each [NTB][VEC][32 lanes] x 16 bytes.
__host__ __device__ inline size_t qmv_ring_offset(const Args& a, int ntb, bool asym, bool staged_x, bool ssm) {
    return ((ssm ? qmv_smem_ssm(a, ntb, asym, staged_x) : qmv_smem(a, staged_x)) + 15) / 16 * 16;
}
__host__ __device__ constexpr size_t qmv_ring_bytes(int depth, int ntb, bool fp8) {
    return static_cast<size_t>(kQmvWarps) * depth * ntb * (fp8 ? 2 : 1) * 512;
}

// A scale's raw bits as f32: SSZ 4 (f32), else 2-byte F16 or BF16 by the runtime dtype code sdt.
template <int SSZ>
__device__ __forceinline__ float qmv_scale(uint32_t bits, int sdt) {
    if constexpr (SSZ == 4)
        return __uint_as_float(bits);
    else {
        if (sdt == kF16) return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
        return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits)));
    }
}

// SSZ: bytes per scale (FP8 and F32 scales 4, F16 / BF16 2). NTB: n-tiles per block. DEPTH: chunks of INT4
// weights in flight per warp (16 B per lane and n-tile each; FP8 chunks are twice the bytes, so it keeps half
// as many). MINB: blocks per SM the registers must allow. MULTI: 2..16 rows, token r in column r % 8 of B
// operand r / 8, x read through L1 (qmm.cu also launches it for one row; else one row, x staged in shared
// memory). ABL: benchmark ablations only
// (bench/gpu/bench_qmv_variants.cu; results are wrong, the time is what is read), a mask of kQmvNoDequant,
// kQmvNoMma, kQmvNoX and kQmvNoFlush, and the exact A/B switches kQmvGeneralLoop (the general loop where the
// fixed-group one applies) and kQmvScalarStage (the scale table one entry per load), and kQmvSubZ (INT4: the
// zero point subtracted from every weight in BF16 before the mma, the dequant before session 10; same
// values up to fp32 rounding) and kQmvBlockStage (the scale table staged by the whole block behind a barrier
// even where each warp could stage its own groups) and kQmvSerialStage (one row: each table piece written as it
// lands and x loaded through registers four pieces per lane at a time, the staging before session 12) and
// kQmvPf1 / kQmvPf2 (an L2 prefetch window ahead of the register slots; every window measured slower,
// session 13), kQmvMmaSum (one row: the group's x sums from the all-ones mma, not staged; qmm.cu launches it
// for INT4 one row, with kQmvBlockStage where noted there), kQmvSumCols (9..16 rows: the x sums by one
// all-ones mma per B operand instead of one with x as A) and the ablation kQmvNoXsum (no x sums at all);
// otherwise qmm.cu launches ABL = 0. SSM: the block stages its n-tiles'
// scales (f32) and zero points for every group in shared memory once, before the programmatic-launch wait
// (qmv_smem_ssm), so the per-chunk path loads only weights and the group flush reads its scales from shared
// memory (qmm.cu: INT4); without it every group's scale (and every chunk's zero point) is a global load with
// its own address arithmetic, issued with the weights (qmm.cu: FP8, one scale per 128x128 block). MAXM: the
// most rows a MULTI launch may have (the block-sum rows; above 8 each A fragment meets two B operands of 8
// tokens); qmm.cu launches 8 for 2..8 rows and 16 for 9..16. WSM: the weights land in a per-warp shared-memory
// ring of DEPTH chunks by cp.async instead of registers (same results bit for bit); qmm.cu launches WSM = false:
// every depth measured slower on the H200, alone and in the 27B decode (docs/BENCHMARKS.md, session 11), so
// bench_qmv_variants keeps it as a variant.
enum : int {
    kQmvNoDequant = 1,
    kQmvNoMma = 2,
    kQmvNoX = 4,
    kQmvNoFlush = 8,
    kQmvGeneralLoop = 16,
    kQmvScalarStage = 32,
    kQmvSubZ = 64,
    kQmvBlockStage = 128,
    kQmvSerialStage = 256,
    kQmvPf1 = 512,  // L2 prefetch of a window of 4 chunks beyond the register slots (kQmvPf2: 8; both: 12)
    kQmvPf2 = 1024,
    kQmvNoXsum = 2048,  // ablation: no x sums, staged or from the mma, any row count (wrong results)
    // One row: the group's x sum from an all-ones mma per k-tile (as 2..16 rows), not staged.
    kQmvMmaSum = 4096,
    // 9..16 rows: the x sums by one all-ones mma per B operand (the form before session 19).
    kQmvSumCols = 8192,
    // Diagnostic (bench_qmv_variants' trace variants; same results): lane 0 of every warp writes %globaltimer
    // and clock64 at entry, after the programmatic-launch wait, before the first chunk, after the last and at
    // exit, and the block's SM, to Args::partials (which this kernel does not otherwise use) as
    // [block][warp][kQmvTraceWords] u64.
    kQmvTrace = 16384,
    // 2..16 rows (session 34): the per-warp accumulators of the block's outputs (acc, 16 registers a lane at
    // two tiles and sixteen rows) kept in shared memory, each lane its own words, read and written at the
    // group flush only; the same fmaf in the same order, so the same bits. Frees the registers a third block
    // per SM needs at sixteen rows (ncu, H100: 127 registers, two blocks per SM;
    // bench/results/qmv_ncu_m16_h100.json).
    kQmvAccSmem = 32768,
    // INT4 (quant_mma.cuh a_fragment_int4_raw): the dequant's three shifts (kQmvShrFma3) or two of them
    // (kQmvShrFma2) as IMAD.HI on the FMA pipe instead of SHF on the ALU pipe; the same bits. Bench variants
    // only (slower on every shape, session 38).
    kQmvShrFma3 = 65536,
    kQmvShrFma2 = 131072,
    // INT4 one row with the x sums from the mma (kQmvMmaSum, x staged by cp.async): the mma in FP16. Each
    // warp converts its staged x range to FP16 times 2^sh (sh from the range's largest |x|, so it lands below
    // 2^16: exact for everything but values 2^32 times smaller than that largest one), the A fragment is
    // a_fragment_int4_f16's (one shift and four lop3 a word, against three and four in BF16), and the flush
    // undoes rows g + 8's factor 16 and the offsets 1024 / 64, the store the 2^sh. Not the same bits as the
    // BF16 form (the weights' partial sums round elsewhere in fp32): checked within tolerance. kQmvF16Sub
    // (with kQmvF16): rows g less 1024 by two HSUB2 a word (a_fragment_int4_f16<true>), for fp32 headroom.
    // Bench variants only: the loop drops 259 -> 231 SASS instructions (SHF 48 -> 16), and it still measured
    // slower on every 27B shape on an H100 (docs/BENCHMARKS.md, session 39): the staging's conversion pass
    // costs more than the loop saves, and the lm_head, where that pass is nothing, is already at the copy
    // rate. FP8 one row (x staged, session 44): the same staging, and the A fragment a_fragment_fp8_f16's
    // (E4M3 to FP16 is exact and one cvt a pair, against about 4.5 instructions a pair into BF16); the
    // products are the BF16 form's times 2^sh exactly, so only x values below FP16's range at that scale
    // differ.
    kQmvF16 = 262144,
    kQmvF16Sub = 524288,
    // 9..16 rows: x's group sums by two all-ones mma per B operand whose A fragment is that operand's x words
    // as loaded (qmv_chunk_xsums XA), instead of one mma per k-tile with x as A (XT), whose A fragment takes
    // one register from each operand and so costs four register moves a k-tile (SASS of session 39: 32
    // IMAD.MOV per two chunks of the wide-weight form's 342 instructions). Another fp32 order of the same
    // sums. One row (with kQmvMmaSum) and 2..8 rows: two such mma a chunk instead of four all-ones-A ones.
    // qmm.cu launches it at every row count (its qmv_xsumq gives the measurements).
    kQmvXsumQuad = 1048576,
    // Ablation (with kQmvF16; bench_qmv_variants' `_pre` forms): x arrives already in FP16 at scale 1, as a
    // producer that wrote it would hand it over, so the staging copies it and skips the max and conversion
    // passes. Prices the in-kernel conversion: the bound on what FP16 x from producers would gain.
    kQmvF16Pre = 2097152
};
// The dynamic shared memory a launch may take with these ABL bits: kQmvAccSmem adds 16 KB of static shared
// memory beside the 16 KB reduction buffer, and static + dynamic must stay within the 227 KB a block may opt
// in to.
constexpr size_t qmv_max_dyn_smem(int abl) {
    return (abl & kQmvAccSmem) != 0 ? kQmvMaxSmem - 40 * 1024 : kQmvMaxSmem;
}
constexpr int kQmvTraceWords = 12;  // [2 i] globaltimer, [2 i + 1] clock64 of point i < 5; [10] SM id
template <int ABL>
__device__ __forceinline__ void qmv_trace(const Args& a, int i) {
    if constexpr ((ABL & kQmvTrace) != 0) {
        if ((threadIdx.x & 31) == 0) {
            unsigned long long t, c;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
            auto* tr = reinterpret_cast<unsigned long long*>(a.partials) +
                       (static_cast<int64_t>(blockIdx.x) * kQmvWarps + (threadIdx.x >> 5)) * kQmvTraceWords;
            tr[2 * i] = t, tr[2 * i + 1] = c;
            if (i == 0) {
                unsigned sm;
                asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
                tr[10] = sm;
            }
        }
    }
}
template <bool FP8,
          bool ASYM,
          int SSZ,
          int NTB,
          int DEPTH,
          int MINB,
          bool MULTI,
          int ABL = 0,
          bool SSM = false,
          int MAXM = 8,
          bool WSM = false,
          bool PERS = false>
__global__ void __launch_bounds__(kQmvThreads, MINB) qmv_kernel(const Args a) {
    qmv_trace<ABL>(a, 0);
    constexpr int VEC = vec(FP8);
    constexpr int DI = MULTI && NTB == 2 ? DEPTH - 1 : DEPTH;  // 2..4 rows: two more accumulators per n-tile
    // Chunks in flight per warp: in registers, fewer for two-tile MULTI and FP8 (their registers); through
    // shared memory (WSM) all DEPTH.
    constexpr int D = WSM ? DEPTH : FP8 ? (DI + 1) / 2 : DI;
    extern __shared__ __align__(16) uint4 smem_u4[];
    constexpr int RT = MULTI ? MAXM : 1;  // token rows kept per warp for the block's sum
    constexpr int NH = MULTI && MAXM > 8 ? 2 : 1;  // B operands of 8 tokens each (9..16 rows: two per A)
    constexpr bool ZF = !FP8 && (ABL & kQmvSubZ) == 0;  // INT4: zero point subtracted after the multiply
    // ZF: the group's x sums from the all-ones mma (2..16 rows, and one row with kQmvMmaSum), else staged.
    constexpr bool MSUM = ZF && (MULTI || (ABL & kQmvMmaSum) != 0);
    constexpr bool XSUM = ZF && !MSUM && (ABL & kQmvNoXsum) == 0;  // one row: chunk sums staged with x
    // 9..16 rows (two B operands): the k-tile's two B fragments of x are, register for register, the A
    // fragment of x itself (rows = the 16 tokens), so ONE mma with an all-ones B sums all 16 tokens (xt:
    // token g in [0], token g + 8 in [2]) where the column form took one per B operand: a third of the
    // kernel's mma at sixteen rows. The flush moves the sums to the C layout of the main mma (tokens 2t, 2t +
    // 1 per operand) by four shuffles per group. kQmvSumCols: the column form (the A/B). XQ (kQmvXsumQuad,
    // qmv_chunk_xsums XA; qmm.cu's form at every row count since session 40): the same mma count on each
    // operand's own x words, without XT's register moves; on one row and 2..8 rows two mma a chunk instead of
    // four.
    constexpr bool XQ = MSUM && (ABL & kQmvXsumQuad) != 0;
    // The ablation kQmvNoXsum on 2..16 rows (and one row with kQmvMmaSum): no all-ones mma, no sums moved.
    constexpr bool NOXS = MSUM && (ABL & kQmvNoXsum) != 0;
    constexpr bool XT = MSUM && NH == 2 && (ABL & kQmvSumCols) == 0 && !XQ;
    float xt[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float xa[NH][4];
#pragma unroll
    for (int h = 0; h < NH; ++h) xa[h][0] = xa[h][1] = xa[h][2] = xa[h][3] = 0.0f;
    constexpr bool F16 = (ABL & kQmvF16) != 0;  // one row, the mma in FP16 (kQmvF16)
    static_assert(F16 || (ABL & kQmvF16Sub) == 0, "kQmvF16Sub goes with kQmvF16");
    static_assert(!F16 || (!MULTI && (MSUM || FP8) && !WSM && !PERS && (ABL & kQmvSerialStage) == 0),
                  "kQmvF16: one row, x staged by cp.async (INT4: x sums from the mma)");
    static_assert(!FP8 || (ABL & kQmvF16Sub) == 0, "kQmvF16Sub: INT4");
    static_assert(F16 || (ABL & kQmvF16Pre) == 0, "kQmvF16Pre goes with kQmvF16");
    float xinv = 1.0f;  // F16: 2^-sh, the warp's x scale, undone as its partials go to the block's sum
    // PERS (persistent blocks): the grid is at most the resident blocks, and a block takes n-tile groups
    // blockIdx.x, + gridDim.x, ...; each warp's load cursor runs on into the next group's chunks, so the
    // weight loads stay in flight through the block's reduction and no block restarts (x staged once). Two
    // reduction buffers: one barrier per group. Scales come with the weights (no staged table).
    static_assert(!PERS || (!SSM && !WSM), "persistent blocks load their scales with the weights");
    __shared__ float red[PERS ? 2 : 1][kQmvWarps][RT][NTB * 16];
    constexpr bool ACS =
        MULTI && !PERS && (ABL & kQmvAccSmem) != 0;  // acc in shared memory, [warp][j, e][lane]
    const int nTB = (a.NT + NTB - 1) / NTB;  // n-tile groups
    // glu parts (quant.h QmmParts::glu, two-tile blocks only): group tb holds gate n-tile tb and up n-tile
    // tb + NT / 2, so the block's reduction has both halves of its 16 outputs.
    const bool glu = NTB == 2 && !PERS && a.parts.glu != 0;
    const int half_nt = a.NT >> 1;
    auto tile_nt = [&](int tb, int j) { return glu ? tb + j * half_nt : tb * NTB + j; };

    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int KC = a.KC;
    const int c0 = warp * KC / kQmvWarps, c1 = (warp + 1) * KC / kQmvWarps;  // this warp's chunks
    const int cpg = qmv_cpg(a);                                              // chunks per scale group
    const uint4* wb = reinterpret_cast<const uint4*>(a.words);
    // kQmvPf1 / kQmvPf2: the PFW chunks after the D register slots are asked of L2 at the start (one bulk
    // prefetch per n-tile and chunk, a lane each), then each load past them asks for the chunk PFW further on,
    // so the HBM reads run up to D + PFW chunks ahead without holding registers.
    constexpr int PFW = ((ABL & kQmvPf1) ? 4 : 0) + ((ABL & kQmvPf2) ? 8 : 0);
    static_assert(PFW * NTB <= 32, "one prefetch per lane at the start");
    // Load cursor: the next chunk lc to load (its group lgrp, lrem chunks left in it) and the lane's weight
    // pointer per n-tile, which moves by one chunk of its n-tile per load (quant/tile_layout.h: a chunk row of
    // tiles chunk-major, one tile n-tile-major).
    // Scale and zero offsets of the lane's rows are fixed; only the group row changes. Integer work per chunk
    // is kept to a few adds: it competes with the dequant for issue slots.
    const uint4* wp[NTB];
    int so_lo[NTB], so_hi[NTB];  // element offsets of rows g / g + 8 within a group's scale (zero) row
    auto set_tiles = [&](int tb) {
#pragma unroll
        for (int j = 0; j < NTB; ++j) {
            const int nt = min(tile_nt(tb, j), a.NT - 1);
            wp[j] = wb + (tile_index(nt, c0, a.NT, KC, a.ntm) * 32 + lane) * VEC;
            const int rlo = min(nt * 16 + g, a.N - 1),
                      rhi = min(nt * 16 + g + 8, a.N - 1);  // past N: never stored
            so_lo[j] = FP8 ? rlo / a.bn * a.SG : rlo;
            so_hi[j] = FP8 ? rhi / a.bn * a.SG : rhi;
        }
    };
    set_tiles(static_cast<int>(blockIdx.x));
    int ltb = static_cast<int>(blockIdx.x);  // PERS: the group the load cursor is in
    const int64_t wstride = static_cast<int64_t>(a.ntm ? 1 : a.NT) * 32 * VEC;  // uint4 per chunk
    const int gstride = FP8 ? 1 : a.NP;                             // scale elements per group step
    int lc = c0, lgrp = c0 / cpg, lrem = cpg - c0 % cpg;

    // In flight per slot: the chunk's weights (registers, or with WSM this warp's ring slot in shared memory,
    // where lane l's 16-byte pieces are the ones it copied and reads back: a lane waits only for its own
    // cp.async groups, one group per load() call) and the raw scale (and zero point) bits of rows g / g + 8.
    uint4 wq[WSM ? 1 : D][NTB][VEC];
    uint4* ring = reinterpret_cast<uint4*>(reinterpret_cast<char*>(smem_u4) +
                                           qmv_ring_offset(a, NTB, ASYM, !MULTI, SSM)) +
                  warp * D * NTB * VEC * 32 + lane;
    uint32_t slo[D][NTB], shi[D][NTB], zr[D][NTB];
    // The scales are read only with the chunk that ends the group (or the warp's range), whose slot the flush
    // uses; zero points too when folded (ZF), else with every chunk (the dequant needs them).
    using ST = std::conditional_t<SSZ == 4, unsigned, unsigned short>;
    const ST* sbase = static_cast<const ST*>(a.scales);
    auto load = [&](int s) {
        if (lc >= c1) {
            bool next = false;
            if constexpr (PERS) {  // on into the block's next n-tile group, if any
                ltb += static_cast<int>(gridDim.x);
                next = ltb < nTB;
                if (next) set_tiles(ltb), lc = c0, lgrp = c0 / cpg, lrem = cpg - c0 % cpg;
            }
            if (!next) {
                if constexpr (WSM) cp_async_commit();  // an empty group keeps the wait count uniform
                return;
            }
        }
        const int gb = lgrp * gstride;
        const bool last = lrem == 1 || lc + 1 == c1;
        if constexpr (PFW > 0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            // Lane j < NTB: n-tile j of chunk lc + PFW (tiles of one chunk row are adjacent, chunk-major only: the
            // bench variants' weights; none past NT).
            if (lane < NTB && lc >= c0 + D && lc + PFW < c1 && ltb * NTB + lane < a.NT) {
                const uint4* pf = wp[0] - lane * VEC + lane * 32 * VEC + PFW * wstride;
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(pf), "n"(VEC * 512) : "memory");
            }
#endif
        }
#pragma unroll
        for (int j = 0; j < NTB; ++j) {
#pragma unroll
            for (int u = 0; u < VEC; ++u) {
                if constexpr (WSM)
                    cp_async16(ring + ((s * NTB + j) * VEC + u) * 32, wp[j] + u);
                else
                    wq[s][j][u] = ld_stream(wp[j] + u);
            }
            wp[j] += wstride;
            if constexpr (!SSM) {
                if (last) slo[s][j] = __ldg(sbase + gb + so_lo[j]), shi[s][j] = __ldg(sbase + gb + so_hi[j]);
                if constexpr (ASYM) {  // folded: only the flush needs it
                    if (!ZF || last)
                        zr[s][j] = __ldg(a.zeros + gb + so_lo[j]) | (__ldg(a.zeros + gb + so_hi[j]) << 8);
                }
            }
        }
        ++lc;
        if constexpr (!SSM) {
            if (--lrem == 0) lrem = cpg, ++lgrp;
        }
        if constexpr (WSM) cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < D; ++s) load(s);
    if constexpr (PFW > 0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        const int pc = c0 + D + lane / NTB, pn = static_cast<int>(blockIdx.x) * NTB + lane % NTB;
        if (lane < PFW * NTB && pc < c1 && pn < a.NT) {
            const uint4* pf = wb + tile_index(pn, pc, a.NT, KC) * 32 * VEC;
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(pf), "n"(VEC * 512) : "memory");
        }
#endif
    }
    auto to_f = [&](uint32_t bits) { return qmv_scale<SSZ>(bits, a.sdt); };
    // SSM: the block's scale (and zero point) table; it does not depend on the previous kernel.
    constexpr int BW = NTB * 16;  // rows per group row of the table
    float* sst = reinterpret_cast<float*>(reinterpret_cast<char*>(smem_u4) + qmv_smem(a, !MULTI));
    // One row: the chunk sums of x [KC] f32, after x.
    float* xsum_sm = reinterpret_cast<float*>(reinterpret_cast<char*>(smem_u4) + static_cast<size_t>(KC) * 128);
    uint32_t* zst = reinterpret_cast<uint32_t*>(sst + qmv_groups(a) * BW);
    // 2-byte scales on 16-byte boundaries (the loader's allocations): 8 rows of one group per 16-byte load
    // (a scale row holds NP = NT * 16 entries, so 8 rows of one n-tile never cross it; rows past N are
    // padding that is never stored). Else one entry per load.
    // Warp-local staging (`local`, block-uniform): when every warp boundary falls on a group boundary, each
    // warp stages only its own groups' rows and starts after a __syncwarp, instead of the whole block waiting
    // at a barrier for the slowest warp's loads (kQmvBlockStage: the block-wide staging, for the A/B).
    bool local = (ABL & kQmvBlockStage) == 0;
    for (int w = 1; w < kQmvWarps; ++w) local = local && (w * KC / kQmvWarps) % cpg == 0;
    const int sg0 = local ? c0 / cpg : 0, sg1 = local ? (c1 + cpg - 1) / cpg : qmv_groups(a);
    const int st0 = local ? lane : static_cast<int>(threadIdx.x), sstep = local ? 32 : kQmvThreads;
    // The vectorized table: the first SB pieces per thread are loaded here, before the programmatic-launch
    // wait, and written to shared memory only after x's copies are issued, so the two round trips overlap
    // (kQmvSerialStage: each piece written as it lands, then x, the order before session 12). Every 27B
    // shape needs at most 2 pieces per thread.
    constexpr bool XA = !MULTI && !WSM && (ABL & kQmvSerialStage) == 0;  // x by cp.async, all at once
    constexpr int SB = XA ? 2 : 0;
    constexpr int PPG = BW / 8;  // 8-row pieces per group row of the table
    const int pi0 = sg0 * PPG + st0, pend = sg1 * PPG;
    bool vstage = false;
    uint4 sv[SB > 0 ? SB : 1];
    uint2 zv[SB > 0 ? SB : 1];
    auto piece_off = [&](int i) {
        const int grp = i / PPG, pr = i - grp * PPG;
        const int nt = min(tile_nt(static_cast<int>(blockIdx.x), pr >> 1), a.NT - 1);
        return static_cast<int64_t>(grp) * a.NP + nt * 16 + (pr & 1) * 8;
    };
    auto piece_load = [&](int i, uint4& v, uint2& z) {
        const int64_t off = piece_off(i);
        v = __ldg(reinterpret_cast<const uint4*>(sbase + off));
        if constexpr (ASYM) z = __ldg(reinterpret_cast<const uint2*>(a.zeros + off));
    };
    auto piece_store = [&](int i, const uint4& v, const uint2& z) {
        const int grp = i / PPG, pr = i - grp * PPG;
        float4* d = reinterpret_cast<float4*>(sst + grp * BW + pr * 8);
        d[0] = make_float4(to_f(v.x & 0xFFFFu), to_f(v.x >> 16), to_f(v.y & 0xFFFFu), to_f(v.y >> 16));
        d[1] = make_float4(to_f(v.z & 0xFFFFu), to_f(v.z >> 16), to_f(v.w & 0xFFFFu), to_f(v.w >> 16));
        if constexpr (ASYM) {
            uint4* zd = reinterpret_cast<uint4*>(zst + grp * BW + pr * 8);
            auto zb = [](uint32_t w, int k) {
                const uint32_t zz = (w >> (8 * k)) & 0xFFu;
                return ZF ? __float_as_uint(128.0f + static_cast<float>(zz)) : (0x4300u + zz) * 0x10001u;
            };
            zd[0] = make_uint4(zb(z.x, 0), zb(z.x, 1), zb(z.x, 2), zb(z.x, 3));
            zd[1] = make_uint4(zb(z.y, 0), zb(z.y, 1), zb(z.y, 2), zb(z.y, 3));
        }
    };
    if constexpr (SSM && !FP8 && SSZ == 2 && (ABL & kQmvScalarStage) == 0) {
        if ((reinterpret_cast<uintptr_t>(a.scales) & 15) == 0 &&
            (!ASYM || (reinterpret_cast<uintptr_t>(a.zeros) & 7) == 0)) {
            vstage = true;
            if constexpr (SB > 0) {
#pragma unroll
                for (int k = 0; k < SB; ++k)
                    if (pi0 + k * sstep < pend) piece_load(pi0 + k * sstep, sv[k], zv[k]);
            } else {
                for (int i = pi0; i < pend; i += sstep) {
                    uint4 v;
                    uint2 z;
                    piece_load(i, v, z);
                    piece_store(i, v, z);
                }
            }
        }
    }
    bool staged = vstage;
    if constexpr (SSM) {
        for (int i = sg0 * BW + st0; !staged && i < sg1 * BW; i += sstep) {
            const int grp = i / BW, r = i - grp * BW;
            const int nt = min(tile_nt(static_cast<int>(blockIdx.x), r >> 4), a.NT - 1);
            const int row = min(nt * 16 + (r & 15), a.N - 1);
            if constexpr (FP8)
                sst[i] = static_cast<const float*>(a.scales)[row / a.bn * a.SG + grp];
            else
                sst[i] = to_f(__ldg(sbase + static_cast<int64_t>(grp) * a.NP + row));
            if constexpr (ASYM) {
                const uint32_t z = __ldg(a.zeros + static_cast<int64_t>(grp) * a.NP + row);
                zst[i] = ZF ? __float_as_uint(128.0f + static_cast<float>(z)) : (0x4300u + z) * 0x10001u;
            }
        }
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");  // x comes from the previous kernel
    qmv_trace<ABL>(a, 1);
    // a.early: the next grid may launch once every block of this one has got here (qmm.cu qmv_early), so its
    // blocks take the SMs that this grid's last partial wave leaves idle and issue their pre-wait loads
    // there; its griddepcontrol.wait still waits for this whole grid. Else at each block's end, below.
    if (!PERS && a.early) asm volatile("griddepcontrol.launch_dependents;");
#endif

    // One row: this warp's x chunks into shared memory as they are (zeros past ldx). Rows 2..16 read their B
    // words straight from x in global memory: every block reads the same few KB (L1 / L2 hits). Staging them
    // like the one row measured slower (H200, docs/BENCHMARKS.md session 7). ZF: each chunk's sum of those
    // BF16 values too (lanes 8i .. 8i + 7 hold one chunk's eight pieces; the warp's range is whole chunks, so
    // a chunk's lanes are all in it or all past it).
    // XSUM: piece p's (x as the mma reads it) share of its chunk's sum; lanes 8i .. 8i + 7 hold one chunk.
    auto chunk_sum = [&](const uint4& v, int p, bool in) {
        float sum = bf16x2_sum(v.x) + bf16x2_sum(v.y) + (bf16x2_sum(v.z) + bf16x2_sum(v.w));
        sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
        sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
        sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 4);
        if (in && (lane & 7) == 0) xsum_sm[p >> 3] = sum;
    };
    if constexpr (XA) {
        // Every piece of this warp's x range in flight at once (down: 9 per lane), no registers held; the
        // table's first pieces go to shared memory while they land, then the chunk sums from shared memory.
        for (int p = c0 * 8 + lane; p < c1 * 8; p += 32) {
            const bool full = p * 8 < a.ldx;
            cp_async16z(smem_u4 + p, a.x + (full ? static_cast<int64_t>(p) * 8 : 0), full);
        }
        cp_async_commit();
        if constexpr (SSM && SB > 0) {
            if (vstage) {
#pragma unroll
                for (int k = 0; k < SB; ++k)
                    if (pi0 + k * sstep < pend) piece_store(pi0 + k * sstep, sv[k], zv[k]);
                for (int i = pi0 + SB * sstep; i < pend; i += sstep) {
                    uint4 v;
                    uint2 z;
                    piece_load(i, v, z);
                    piece_store(i, v, z);
                }
            }
        }
        cp_async_wait<0>();
        if constexpr (F16 && (ABL & kQmvF16Pre) == 0) {
            // The range's largest |x| (BF16 bits without the sign compare as the values do), then every piece
            // this lane copied rewritten as FP16 times 2^sh, sh = 142 - its exponent field: (2 - 2^-7) 2^15
            // at most, inside FP16's 65504. Capped at 126 so 2^-sh stays a normal f32 (an all-zero range).
            uint32_t m = 0;
            for (int p = c0 * 8 + lane; p < c1 * 8; p += 32) {
                const uint4 v = smem_u4[p];
                m = __vmaxu2(m, __vmaxu2(__vmaxu2(v.x & 0x7FFF7FFFu, v.y & 0x7FFF7FFFu),
                                         __vmaxu2(v.z & 0x7FFF7FFFu, v.w & 0x7FFF7FFFu)));
            }
            m = __reduce_max_sync(0xFFFFFFFFu, max(m & 0xFFFFu, m >> 16));
            const int sh = min(142 - static_cast<int>(m >> 7), 126);
            const float mul = __uint_as_float(static_cast<uint32_t>(127 + sh) << 23);
            xinv = __uint_as_float(static_cast<uint32_t>(127 - sh) << 23);
            for (int p = c0 * 8 + lane; p < c1 * 8; p += 32) {
                const uint4 v = smem_u4[p];
                smem_u4[p] = make_uint4(bf16x2_to_f16x2_scaled(v.x, mul), bf16x2_to_f16x2_scaled(v.y, mul),
                                        bf16x2_to_f16x2_scaled(v.z, mul), bf16x2_to_f16x2_scaled(v.w, mul));
            }
        }
        if constexpr (XSUM) {
            for (int pb = c0 * 8; pb < c1 * 8; pb += 32) {
                const int p = pb + lane;
                const bool in = p < c1 * 8;
                const uint4 v = in ? smem_u4[p] : make_uint4(0u, 0u, 0u, 0u);
                chunk_sum(v, p, in);
            }
        }
        if constexpr (!SSM) __syncwarp();
    } else if constexpr (!MULTI) {
#pragma unroll 4
        for (int pb = c0 * 8; pb < c1 * 8; pb += 32) {
            const int p = pb + lane;
            const bool in = p < c1 * 8;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (in && p * 8 < a.ldx) v = __ldg(reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(p) * 8));
            if (in) smem_u4[p] = v;
            if constexpr (XSUM) {
                chunk_sum(v, p, in);
            }
        }
        if constexpr (!SSM) __syncwarp();
    }
    if constexpr (SSM) {  // the scale table (and each warp's x) is complete
        if (local)
            __syncwarp();
        else
            __syncthreads();
    }
    qmv_trace<ABL>(a, 2);
    // MULTI: the lane's B column of operand h is token g + 8h. Its two 16-byte B words of chunk 0 (one row:
    // shared memory; else that token's row of x, whole chunks: qmm.cu).
    bool row_ok[NH];
    const uint4* xl[NH];
#pragma unroll
    for (int h = 0; h < NH; ++h) {
        row_ok[h] = g + 8 * h < a.M;
        xl[h] = MULTI ? reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(row_ok[h] ? g + 8 * h : 0) *
                                                                 a.ldx) +
                            t * 2
                      : smem_u4 + t * 2;
    }

    // ZF: the current group's sums of x, for the lane's tokens 8h + 2t, 8h + 2t + 1 in xs[h][0], xs[h][1] (one
    // row: the staged chunk sums added up; 2..16 rows: the all-ones mma's C fragment, whose [2], [3] repeat
    // [0], [1]).
    float xs[NH][4];
#pragma unroll
    for (int h = 0; h < NH; ++h) xs[h][0] = xs[h][1] = xs[h][2] = xs[h][3] = 0.0f;

    constexpr int NA = MULTI ? 4 * NH : 2;  // one row: columns 2t and 2t + 1 of C are equal, keep c0 / c2
    float acc[NTB][NA], cur[NTB][4 * NH];
    __shared__ float accs[ACS ? kQmvWarps : 1][ACS ? NTB * NA : 1][32];
#pragma unroll
    for (int j = 0; j < NTB; ++j) {
#pragma unroll
        for (int e = 0; e < NA; ++e) {
            acc[j][e] = 0.0f;
            if constexpr (ACS) accs[warp][j * NA + e][lane] = 0.0f;
        }
#pragma unroll
        for (int e = 0; e < 4 * NH; ++e) cur[j][e] = 0.0f;
    }
    // SSM: row g of the current group's table row (a running pointer: a loop-carried value is not recomputed).
    const float* sgrp = sst + (c0 / cpg) * BW + g;
    const uint32_t* zgrp = zst + (c0 / cpg) * BW + g;
    // Chunk c (weights in slot s) into cur; `first`: the chunk opens a scale group whose cur was not zeroed,
    // so its first mma takes no accumulator.
    auto chunk = [&](int s, int c, bool first) {
        // Slot s's weights: WSM reads back this lane's pieces once its group (the oldest of D) has landed.
        uint4 w[NTB][VEC];
        if constexpr (WSM) {
            cp_async_wait<D - 1>();
#pragma unroll
            for (int j = 0; j < NTB; ++j)
#pragma unroll
                for (int u = 0; u < VEC; ++u) w[j][u] = ring[((s * NTB + j) * VEC + u) * 32];
        } else {
#pragma unroll
            for (int j = 0; j < NTB; ++j)
#pragma unroll
                for (int u = 0; u < VEC; ++u) w[j][u] = wq[s][j][u];
        }
        if constexpr (ZF && !MSUM) {
            const float v = (ABL & kQmvNoXsum) ? 0.0f : xsum_sm[c];
            xs[0][0] = first ? v : xs[0][0] + v;
        }
        uint32_t b0[NH][4], b1[NH][4];
#pragma unroll
        for (int h = 0; h < NH; ++h) {
            if constexpr ((ABL & kQmvNoX) != 0) {
#pragma unroll
                for (int kt = 0; kt < 4; ++kt) b0[h][kt] = b1[h][kt] = 0x3F803F80u;
            } else {
                uint4 u = make_uint4(0u, 0u, 0u, 0u), v = u;
                if (!MULTI || row_ok[h]) {
                    if constexpr (MULTI)
                        u = __ldg(xl[h] + c * 8), v = __ldg(xl[h] + c * 8 + 1);
                    else
                        u = xl[h][c * 8], v = xl[h][c * 8 + 1];
                }
                b0[h][0] = u.x, b1[h][0] = u.y, b0[h][1] = u.z, b1[h][1] = u.w;
                b0[h][2] = v.x, b1[h][2] = v.y, b0[h][3] = v.z, b1[h][3] = v.w;
            }
        }
        // The tokens' sums of x over this chunk.
        if constexpr (MSUM && !NOXS) qmv_chunk_xsums<XT, NH, F16, XQ>(b0, b1, first, xt, xs, xa);
#pragma unroll
        for (int j = 0; j < NTB; ++j) {
            uint32_t zx = 0x43084308u, zy = 0x43084308u;  // BF16x2 of 128 + z (symmetric: z = 8)
            if constexpr (ZF) {
                // subtracted at the flush
            } else if constexpr (ASYM && SSM) {
                zx = zgrp[j * 16], zy = zgrp[j * 16 + 8];
            } else if constexpr (ASYM) {
                zx = (0x4300u + (zr[s][j] & 0xFFu)) * 0x10001u;
                zy = (0x4300u + (zr[s][j] >> 8)) * 0x10001u;
            }
#pragma unroll
            for (int kt = 0; kt < 4; ++kt) {
                uint32_t a0, a1, a2, a3;
                if constexpr ((ABL & kQmvNoDequant) != 0) {
                    const uint4& qq = w[j][0];
                    a0 = qq.x ^ zx, a1 = qq.y, a2 = qq.z, a3 = qq.w;
                } else if constexpr (F16 && FP8) {
                    a_fragment_fp8_f16<VEC>(w[j], kt, a0, a1, a2, a3);
                } else if constexpr (F16) {
                    a_fragment_int4_f16<(ABL & kQmvF16Sub) != 0>(w[j][0], kt, a0, a1, a2, a3);
                } else if constexpr (ZF) {
                    a_fragment_int4_raw<(ABL & kQmvShrFma3) != 0   ? 3
                                        : (ABL & kQmvShrFma2) != 0 ? 2
                                                                   : 0>(w[j][0], kt, a0, a1, a2, a3);
                } else {
                    a_fragment<FP8>(w[j], kt, zx, zy, a0, a1, a2, a3);
                }
#pragma unroll
                for (int h = 0; h < NH; ++h) {
                    if constexpr ((ABL & kQmvNoMma) != 0)
                        cur[j][4 * h + (kt & 3)] +=
                            __uint_as_float((a0 ^ a1 ^ a2 ^ a3 ^ b0[h][kt] ^ b1[h][kt]) & 0x3FFFFFFFu);
                    else if (F16 && first && kt == 0)
                        mma_f16_first(cur[j] + 4 * h, a0, a1, a2, a3, b0[h][kt], b1[h][kt]);
                    else if (F16)
                        mma_f16(cur[j] + 4 * h, a0, a1, a2, a3, b0[h][kt], b1[h][kt]);
                    else if (first && kt == 0)
                        mma_bf16_first(cur[j] + 4 * h, a0, a1, a2, a3, b0[h][kt], b1[h][kt]);
                    else
                        mma_bf16(cur[j] + 4 * h, a0, a1, a2, a3, b0[h][kt], b1[h][kt]);
                }
            }
        }
    };
    // The group's sums times its scales into acc (slot s carries the raw scale bits without SSM); `zero`:
    // clear cur for the next group.
    // ZF: each sum less (128 + z) times the group's x sum first.
    auto flush = [&](int s, bool zero) {
        if constexpr (NOXS) {
            // the ablation: no sums to move
        } else if constexpr (XT) {
            qmv_xt_sums(xt, t, xs);
            if (zero) xt[0] = xt[1] = xt[2] = xt[3] = 0.0f;
        } else if constexpr (XQ) {
            if constexpr (MULTI)
                qmv_xa_sums(xa, t, xs);
            else  // one row: every lane's x words are the row's, so every lane holds the chunk sums
                xs[0][0] = xa[0][0] + xa[0][2];
            if (zero) {
#pragma unroll
                for (int h = 0; h < NH; ++h) xa[h][0] = xa[h][1] = xa[h][2] = xa[h][3] = 0.0f;
            }
        }
#pragma unroll
        for (int j = 0; j < NTB; ++j) {
            float sl, sh;
            if constexpr (SSM)
                sl = sgrp[j * 16], sh = sgrp[j * 16 + 8];
            else
                sl = to_f(slo[s][j]), sh = to_f(shi[s][j]);
            float zl = 136.0f, zh = 136.0f;  // 128 + z, symmetric z = 8
            if constexpr (ZF && ASYM && SSM) {
                zl = __uint_as_float(zgrp[j * 16]), zh = __uint_as_float(zgrp[j * 16 + 8]);
            } else if constexpr (ZF && ASYM) {
                zl = 128.0f + static_cast<float>(zr[s][j] & 0xFFu), zh = 128.0f + static_cast<float>(zr[s][j] >> 8);
            }
            if constexpr (MULTI) {
#pragma unroll
                for (int e = 0; e < 4 * NH; ++e) {
                    const float v = ZF ? fmaf(-((e & 2) ? zh : zl), xs[e >> 2][e & 1], cur[j][e]) : cur[j][e];
                    if constexpr (ACS) {
                        float& r = accs[warp][j * NA + e][lane];
                        r = fmaf(v, (e & 2) ? sh : sl, r);
                    } else {
                        acc[j][e] = fmaf(v, (e & 2) ? sh : sl, acc[j][e]);
                    }
                }
            } else if constexpr (F16 && !FP8) {
                // rows g: 1024 + q; rows g + 8: 16 (64 + q), the factor exact in fp32 (zl / zh hold 128 + z)
                const float vl =
                    fmaf(-(zl + ((ABL & kQmvF16Sub) != 0 ? -128.0f : 896.0f)), xs[0][0], cur[j][0]);
                const float vh = fmaf(-(zh - 64.0f), xs[0][0], cur[j][2] * 0.0625f);
                acc[j][0] = fmaf(vl, sl, acc[j][0]), acc[j][1] = fmaf(vh, sh, acc[j][1]);
            } else {
                const float vl = ZF ? fmaf(-zl, xs[0][0], cur[j][0]) : cur[j][0];
                const float vh = ZF ? fmaf(-zh, xs[0][0], cur[j][2]) : cur[j][2];
                acc[j][0] = fmaf(vl, sl, acc[j][0]), acc[j][1] = fmaf(vh, sh, acc[j][1]);
            }
            if (zero) {
#pragma unroll
                for (int e = 0; e < 4 * NH; ++e) cur[j][e] = 0.0f;
            }
        }
        if (zero) {
#pragma unroll
            for (int h = 0; h < NH; ++h) xs[h][0] = xs[h][1] = xs[h][2] = xs[h][3] = 0.0f;
        }
        sgrp += BW, zgrp += BW;
    };
    // The block's sums of one n-tile group: each warp's partial into red[buf], then the block adds them in
    // warp order (deterministic) and stores. C[row][token]: lane (g, t) holds rows g, g + 8 of tokens 8h + 2t,
    // 8h + 2t + 1 in acc[4h..4h + 3] (one row: every column is token 0).
    auto reduce_store = [&](int tb, int buf) {
        if constexpr (MULTI) {
            if constexpr (ACS) {
#pragma unroll
                for (int j = 0; j < NTB; ++j)
#pragma unroll
                    for (int e = 0; e < NA; ++e) acc[j][e] = accs[warp][j * NA + e][lane];
            }
#pragma unroll
            for (int j = 0; j < NTB; ++j)
#pragma unroll
                for (int e = 0; e < 4 * NH; ++e) {
                    const int tok = 8 * (e >> 2) + 2 * t + (e & 1);
                    if (tok < a.M) red[buf][warp][tok][j * 16 + g + ((e >> 1) & 1) * 8] = acc[j][e];
                }
        } else if (t == 0) {
#pragma unroll
            for (int j = 0; j < NTB; ++j)
                red[buf][warp][0][j * 16 + g] = acc[j][0] * xinv,
                                           red[buf][warp][0][j * 16 + g + 8] = acc[j][1] * xinv;
        }
        __syncthreads();
        if (glu) {  // h[tok][tb * 16 + r] = silu(g) * u, g and u rounded as their stored parts would be
            for (int i = static_cast<int>(threadIdx.x); i < a.M * 16; i += kQmvThreads) {
                const int tok = i >> 4, r = i & 15;
                float sg = 0.0f, su = 0.0f;
#pragma unroll
                for (int w = 0; w < kQmvWarps; ++w) sg += red[buf][w][tok][r], su += red[buf][w][tok][16 + r];
                const float gq = round_as(a.ydt, sg), uq = round_as(a.ydt, su);
                st(a.parts.data[0], a.ydt, static_cast<int64_t>(tok) * (a.N >> 1) + tb * 16 + r,
                   gq * sigmoidf_(gq) * uq);
            }
            return;
        }
        if constexpr (MULTI) {
            if (a.parts.conv) {  // QmmParts::conv for 1..16 rows: a thread per column runs its tokens in order
                for (int col = static_cast<int>(threadIdx.x); col < NTB * 16; col += kQmvThreads) {
                    const int n = tb * NTB * 16 + col;
                    if (n >= a.N) continue;
                    if (n >= a.parts.col[1]) {  // the other parts: stored as they are
                        for (int tok = 0; tok < a.M; ++tok) {
                            float sum = 0.0f;
#pragma unroll
                            for (int w = 0; w < kQmvWarps; ++w) sum += red[buf][w][tok][col];
                            store_y(a, tok, n, sum);
                        }
                        continue;
                    }
                    // conv1d_silu's step kernel for channel n over the a.M rows, same formula and order
                    constexpr int KC4 = kQmmConvK;
                    const int C = a.parts.col[1];
                    float wc[KC4], rows[KC4];
#pragma unroll
                    for (int j = 0; j < KC4; ++j) wc[j] = ld(a.parts.conv_w, a.parts.conv_wdt, static_cast<int64_t>(n) * KC4 + j);
#pragma unroll
                    for (int j = 0; j < KC4 - 1; ++j) rows[j] = ld(a.parts.conv_state, a.parts.conv_sdt, static_cast<int64_t>(j) * C + n);
                    for (int tok = 0; tok < a.M; ++tok) {
                        float sum = 0.0f;
#pragma unroll
                        for (int w = 0; w < kQmvWarps; ++w) sum += red[buf][w][tok][col];
                        rows[KC4 - 1] = round_as(a.ydt, sum);
                        float acc = 0.0f;
#pragma unroll
                        for (int j = 0; j < KC4; ++j) acc += wc[j] * rows[j];
                        st(a.parts.data[0], a.ydt, static_cast<int64_t>(tok) * C + n, acc * sigmoidf_(acc));
#pragma unroll
                        for (int j = 0; j + 1 < KC4; ++j) rows[j] = rows[j + 1];
                    }
#pragma unroll
                    for (int j = 0; j < KC4 - 1; ++j) st(a.parts.conv_state, a.parts.conv_sdt, static_cast<int64_t>(j) * C + n, rows[j]);
                }
                return;
            }
        }
        for (int i = static_cast<int>(threadIdx.x); i < a.M * NTB * 16; i += kQmvThreads) {
            const int tok = i / (NTB * 16), col = i - tok * (NTB * 16);
            const int n = tb * NTB * 16 + col;
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < kQmvWarps; ++w) sum += red[buf][w][tok][col];
            if (n < a.N) store_y(a, tok, n, sum);
        }
    };
    bool done = false;
    if constexpr (PERS) {
        // The general loop's group bookkeeping over the flattened chunk sequence of the block's groups; the
        // slot index runs on across group boundaries.
        int c = c0, rem = cpg - c0 % cpg, tb = static_cast<int>(blockIdx.x), buf = 0;
        bool more = true;
        while (more) {
#pragma unroll
            for (int s = 0; s < D; ++s) {
                if (c < c1) {
                    chunk(s, c, false);
                    if (--rem == 0 || c + 1 == c1) {
                        flush(s, true);
                        rem = cpg;
                    }
                    load(s);
                    ++c;
                }
                if (c >= c1) {  // the group's chunks are done (or the warp has none)
                    const bool last = tb + static_cast<int>(gridDim.x) >= nTB;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                    if (last) asm volatile("griddepcontrol.launch_dependents;");
#endif
                    reduce_store(tb, buf);
#pragma unroll
                    for (int j = 0; j < NTB; ++j)
#pragma unroll
                        for (int e = 0; e < NA; ++e) acc[j][e] = 0.0f;
                    buf ^= 1, tb += static_cast<int>(gridDim.x), c = c0, rem = cpg - c0 % cpg;
                    if (last) {
                        more = false;
                        break;
                    }
                }
            }
        }
        done = true;
    }
    // FG: chunks an iteration of the fixed-group loop takes, whole groups of two: D, or two with one chunk in
    // flight (its one register slot taken twice). Before session 28 the forms with one chunk in flight and every
    // form without the staged scale table (FP8) ran the general loop (tools/sass_loops.py: ~100 SASS
    // instructions a unit against ~89 for INT4 9..16 rows on two tiles, ~150 against 130 for FP8 9..16 rows).
    // Measured (bench/results/qmv_fixed_d1.json, two calls): INT4 2..16 rows 3-11% faster on every 27B shape; FP8
    // one tile 9..16 rows 2-9% faster on every shape, 2..8 rows 5-18% faster but 2-6% slower on gate_up and the
    // DeltaNet q | k | v | z (which qmm.cu gives two tiles); FP8 one row on one tile (x staged, no table) 4-8%
    // slower on gate_up and q | k | v | z, so that form keeps the general loop.
    constexpr int FG = D == 1 ? 2 : D;
    if constexpr ((SSM || MULTI) &&
                  (ABL & ~(kQmvScalarStage | kQmvPf1 | kQmvPf2 | kQmvNoXsum | kQmvMmaSum | kQmvSumCols |
                           kQmvTrace | kQmvAccSmem | kQmvF16 | kQmvF16Sub | kQmvXsumQuad | kQmvF16Pre)) ==
                      0 &&
                  FG % 2 == 0) {
        // Scale groups of two chunks and a warp range of whole groups (g128 weights, K a multiple of 1024
        // channels): the flushes fall on fixed slots, each group's first mma starts its sum, and the loop
        // keeps no group counter (the general loop below spent ~20 instructions per chunk on that
        // bookkeeping: session 9 SASS). Without the staged table the scales (and zero points) of a group
        // ride with its second chunk, in the slot the flush reads before load() refills it.
        if (cpg == 2 && ((c0 | c1) & 1) == 0) {
            for (int cb = c0; cb < c1; cb += FG) {
#pragma unroll
                for (int u = 0; u < FG; ++u) {
                    const int s = u % D, c = cb + u;
                    if (u > 0 && u % 2 == 0 && c >= c1) break;  // the range ends on a group boundary
                    chunk(s, c, u % 2 == 0);
                    if (u % 2 == 1) flush(s, false);
                    load(s);
                }
            }
            done = true;
        }
    }
    if (!PERS && !done) {
        int rem = cpg - c0 % cpg;  // chunks left in the current scale group
        for (int cb = c0; cb < c1; cb += D) {
#pragma unroll
            for (int s = 0; s < D; ++s) {
                const int c = cb + s;
                if (c >= c1) break;
                chunk(s, c, false);
                if ((ABL & kQmvNoFlush) != 0 && c + 1 < c1) {
                    --rem;                               // the flush only at the warp's range end
                } else if (--rem == 0 || c + 1 == c1) {  // group end, or the warp's range ends inside the group
                    flush(s, true);
                    rem = cpg;
                }
                load(s);
            }
        }
    }
    qmv_trace<ABL>(a, 3);
    if constexpr (!PERS) {  // persistent blocks stored every group in the loop
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (!a.early) asm volatile("griddepcontrol.launch_dependents;");
#endif
        reduce_store(static_cast<int>(blockIdx.x), 0);
    }
    qmv_trace<ABL>(a, 4);
}

}  // namespace grimoire::cuda::qmm
