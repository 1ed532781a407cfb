// The quantized-weight x activation kernel for M = 1..16 rows, instantiated by qmm.cu.
//
// Decode is weight-bandwidth-bound: everything is arranged so the packed weight streams from HBM once, at the
// copy rate, with as few instructions per weight byte as the dequant allows (the kernel is issue-bound long
// before it is tensor-bound: ~12 instructions per 32-bit word of 8 INT4 weights is the floor, see below).
//   * The weight is the mma A operand (16 output features x 16 channels per k-tile, quant/repack.h for the
//     fragment-ordered layout), the activations the B operand (16 channels x 8 tokens; two token tiles for
//     M > 8).
//   * block = 4 warps x 4 n-tiles = 256 output features ("column block"). The work is the list of (column
//     block, 64-channel chunk) steps in column-block-major order, cut into as many equal contiguous ranges as
//     blocks fit on the GPU (stream-K): one wave, every SM equally loaded whatever N and K are. A column block
//     whose chunks all fall to one grid block is written directly; one split between grid blocks is summed from
//     their partials.
//   * Every warp is its own pipeline: per chunk it copies with cp.async, S - 1 chunks ahead of its math, its
//     INT4 weights (16 bytes per lane per n-tile), the chunk of x (M rows, BF16) and the scales / zero points of
//     its 64 rows for the chunk's group(s) into a ring of shared-memory stages. Loads in flight hold no
//     registers, nothing waits on another warp (no barrier in the main loop), and a lane only ever waits for its
//     own copies (cp.async.wait_group, then __syncwarp for the x / scale pieces other lanes copied). FP8
//     weights (twice the bytes per dequant instruction) go straight to registers one chunk ahead instead.
//   * Dequant in registers: INT4 nibbles become BF16 128 + q with one LOP3 (the 0x4300 exponent trick) and then
//     q - z with one HSUB2, exact; FP8 E4M3 bytes are moved into BF16 bit positions and multiplied by 2^120
//     (exact, subnormals included). The group scale is applied in fp32 to the mma result of each group, so
//     y = sum_g s_g * sum_k (q - z) x exactly as the format defines W, with fp32 accumulation.
//   * Scale groups: GK = 0 when groups are whole chunks (a multiple of 64 channels, or one group: the group
//     ends are counted in chunks), GK = 1 / 2 for groups of 16 / 32 channels (flushed at fixed k-tiles). Other
//     group sizes take the dequant path (qmm_supported).
//   * Partials go to a workspace ([grid block][first / last segment][M][256]); the last grid block to arrive for
//     a column block (atomic counter) sums them in grid-block order (deterministic) and writes y, then resets
//     the counter for the next launch.
#pragma once
#include <cuda_fp8.h>

#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fused_util.cuh"
#include "kernels/cuda/quant.h"
#include "quant/tile_layout.h"

// Blocks per SM the register allocation must allow (INT4 one token tile: 4, i.e. 128 registers; FP8 and two
// token tiles one fewer). GRIMOIRE_QMM_MIN_BLOCKS overrides it (benchmark variants).
// INT4 weights through registers like FP8 (1) or through the shared-memory ring (0): a benchmark variant.
#ifndef GRIMOIRE_QMM_INT4_REGS
#define GRIMOIRE_QMM_INT4_REGS 0
#endif
#ifndef GRIMOIRE_QMM_MIN_BLOCKS
#define GRIMOIRE_QMM_MIN_BLOCKS 0
#endif
// Programmatic dependent launch (sm_90): the grid may start while its predecessor still runs (the launcher sets
// the attribute on Hopper); each block prefetches into L2 the weights of its first GRIMOIRE_QMM_PDL_PF steps
// (they depend on nothing) and only then waits for the predecessor's results (x, and the workspace a previous
// qmm may still be reducing). Without the attribute the wait returns at once. A block lets the next grid launch
// once its last chunk is done (not at its start: small grids would then let several launches queue up on the
// SMs, each prefetching, and thrash the L2).
#ifndef GRIMOIRE_QMM_PDL
#define GRIMOIRE_QMM_PDL 1
#endif
#ifndef GRIMOIRE_QMM_PDL_PF
#define GRIMOIRE_QMM_PDL_PF 4
#endif

namespace grimoire::cuda::qmm {

#ifdef GRIMOIRE_QMM_TRACE
// Diagnostic: %globaltimer at fixed points of each block of the last two launches (slot = launch parity:
// entry, after the dependency wait, first chunk landed, main loop done, exit) and its SM.
constexpr int kTraceBlocks = 2048, kTracePoints = 6;
__device__ unsigned long long g_trace[2][kTraceBlocks][kTracePoints];
__device__ __forceinline__ void trace_at(int slot, int i) {
    if (threadIdx.x == 0 && blockIdx.x < kTraceBlocks) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        g_trace[slot][blockIdx.x][i] = t;
        if (i == 0) {
            unsigned sm;
            asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
            g_trace[slot][blockIdx.x][5] = sm;
        }
    }
}
#define QMM_TRACE(i) trace_at(a.tslot, i)
#else
#define QMM_TRACE(i) ((void)0)
#endif

constexpr int kWarps = 4;
constexpr int kNtPerWarp = 4;  // n-tiles per warp: shares each B fragment and the per-k-tile bookkeeping
constexpr int kNtPerBlock = kWarps * kNtPerWarp;  // 16 n-tiles = 256 output features
constexpr int kThreads = 32 * kWarps;
constexpr int kColBlock = kNtPerBlock * 16;
constexpr int kXRow = 144;  // bytes per staged x row (128 + 16: the 8 token rows' B loads hit distinct banks)
constexpr bool reg_weights(bool fp8) { return fp8 || GRIMOIRE_QMM_INT4_REGS; }
constexpr int stages(bool fp8) { return reg_weights(fp8) ? 3 : 5; }  // weights in registers: x and scales only
constexpr int vec(bool fp8) { return fp8 ? 2 : 1; }  // uint4 per lane per n-tile per chunk
constexpr int kSlotTable = 256;                        // partial slots kept in shared memory for the reduction

struct Args {
    const uint32_t* words;  // tiles (quant/tile_layout.h) x INT4 [32][4], FP8 [32][8]
    const void* scales;     // INT4: [G][NP] of sdt; FP8: f32 [SN][SG]
    int sdt;                // INT4 scale dtype code (kF16, kBF16, kF32)
    const uint8_t* zeros;   // INT4 asymmetric: [G][NP]
    const uint16_t* x;      // [M][ldx] BF16 (act-order gather / conversion already applied)
    int ldx;                // x row stride: K (x as given) or K rounded up to 64 (the workspace copy)
    void* y;
    int ydt;
    float* partials;  // [gridDim.x][2][M][kColBlock]
    int* counters;    // [column blocks]
    int N, K, NT, KC, G, gs;  // gs: channels per scale group along K (K for one group)
    int NP;                   // INT4: padded N (scale row stride)
    int bn, SG;               // FP8 scale grid
    int ntm;                  // the tile order (tile_layout.h TileOrder): n-tile-major ones the qmv kernel only
    int M;
    int W;                    // steps: column blocks x KC
    int gpc;                  // scale groups per chunk (1, or 64 / gs for small groups)
    int ssz;                  // bytes per scale (2 or 4)
    int xoff, soff, zoff, stage;  // byte offsets in one ring stage, and its size
    int nstage;                   // TMA kernel (quant_mma_tma.cuh): ring stages
    int early;  // let the next grid launch at this one's start (see pdl_enter in common.cuh)
    QmmParts parts;  // n > 0: the columns go to these tensors instead of y (store_y)
#ifdef GRIMOIRE_QMM_TRACE
    int tslot;  // trace slot (launch parity)
#endif
};

// Ring stage layout of one launch (Args::xoff..stage); returns the shared memory the block needs.
inline size_t plan_stage(Args& a, bool fp8, bool asym) {
    a.xoff = reg_weights(fp8) ? 0 : kNtPerWarp * 32 * 16;  // register weights bypass the ring
    a.soff = a.xoff + a.M * kXRow;
    a.zoff = a.soff + a.gpc * 64 * a.ssz;
    a.stage = (a.zoff + (asym ? a.gpc * 64 : 0) + 15) / 16 * 16;
    return static_cast<size_t>(kWarps) * stages(fp8) * a.stage;
}

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {  // read once: no L1 allocation
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem));
}
// 16 bytes, or zeros when !full (src must still be a valid address).
__device__ __forceinline__ void cp_async16z(void* smem, const void* gmem, bool full) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(full ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");  // smem reads after it stay after it
}

// common.cuh's mma16816 on c[0..3] (the quant kernels keep several C fragments in one array).
__device__ __forceinline__ void mma_bf16(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    mma16816(*reinterpret_cast<float(*)[4]>(c), a0, a1, a2, a3, b0, b1);
}

// c = a * b, no accumulator input: the first mma of a scale group (no zeroing moves before it).
__device__ __forceinline__ void mma_bf16_first(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}

// (a & mask) | magic in one LOP3 (the compiler emits two).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t mask, uint32_t magic) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(magic));
    return d;
}

__device__ __forceinline__ uint32_t bf16x2_sub(uint32_t a, uint32_t b) {
    __nv_bfloat162 r = __hsub2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
    __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
}

// The E4M3 bytes in bits 0-7 and 16-23 of h -> BF16x2 with the value divided by 2^120: sign to bit 15,
// exponent and mantissa to bits 4-10 of each half (two LOP3 + two shifts; the other bytes are masked off).
__device__ __forceinline__ uint32_t fp8x2_to_bf16x2_scaled(uint32_t h) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(h << 8), "r"(0x80008000u), "r"((h << 4) & 0x07F007F0u));
    return d;
}
// The same for the E4M3 bytes in bits 8-15 and 24-31: their signs are already at bits 15 / 31, so one shift
// (the form above on h >> 8 spent a shift and a mask more: SASS of session 20).
__device__ __forceinline__ uint32_t fp8x2_odd_to_bf16x2_scaled(uint32_t h) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(h), "r"(0x80008000u), "r"((h >> 4) & 0x07F007F0u));
    return d;
}
constexpr uint32_t kBf16x2Pow120 = 0x7B807B80u;  // 2^120 in both halves

template <class ST>
__device__ __forceinline__ float load_scale(const void* p, int64_t i);
template <>
__device__ __forceinline__ float load_scale<__half>(const void* p, int64_t i) {
    return __half2float(static_cast<const __half*>(p)[i]);
}
template <>
__device__ __forceinline__ float load_scale<__nv_bfloat16>(const void* p, int64_t i) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
template <>
__device__ __forceinline__ float load_scale<float>(const void* p, int64_t i) {
    return static_cast<const float*>(p)[i];
}

__device__ __forceinline__ int range_start(int b, int W, int B) {
    return static_cast<int>(static_cast<int64_t>(b) * W / B);
}
// The grid block whose range holds step w.
__device__ __forceinline__ int block_of(int w, int W, int B) {
    int b = static_cast<int>(static_cast<int64_t>(w) * B / W);
    while (b + 1 < B && range_start(b + 1, W, B) <= w) ++b;
    while (b > 0 && range_start(b, W, B) > w) --b;
    return b;
}


// The A fragment (quant/repack.h order) of k-tile kt from a lane's weight words of one n-tile (uint4 x VEC).
// INT4: (q - z) exact in BF16 (LOP3 to 128 + q, HSUB2 of 128 + z: zx / zy for rows g / g + 8). FP8: the E4M3
// bytes moved into BF16 bit positions (the value / 2^120), times 2^120 (exact, subnormals included).
template <bool FP8, int VEC>
__device__ __forceinline__ void a_fragment(const uint4 (&q)[VEC], int kt, uint32_t zx, uint32_t zy, uint32_t& a0,
                                           uint32_t& a1, uint32_t& a2, uint32_t& a3) {
    if constexpr (FP8) {
        const uint4& qq = q[kt >> 1];
        const uint32_t w0x = (kt & 1) ? qq.z : qq.x, w1x = (kt & 1) ? qq.w : qq.y;
        a0 = bf16x2_mul(fp8x2_to_bf16x2_scaled(w0x), kBf16x2Pow120);
        a1 = bf16x2_mul(fp8x2_odd_to_bf16x2_scaled(w0x), kBf16x2Pow120);
        a2 = bf16x2_mul(fp8x2_to_bf16x2_scaled(w1x), kBf16x2Pow120);
        a3 = bf16x2_mul(fp8x2_odd_to_bf16x2_scaled(w1x), kBf16x2Pow120);
        (void)zx, (void)zy;
    } else {
        const uint4& qq = q[0];
        const uint32_t wd = kt == 0 ? qq.x : kt == 1 ? qq.y : kt == 2 ? qq.z : qq.w;
        a0 = bf16x2_sub(and_or(wd, 0x000F000Fu, 0x43004300u), zx);
        a1 = bf16x2_sub(and_or(wd >> 4, 0x000F000Fu, 0x43004300u), zy);
        a2 = bf16x2_sub(and_or(wd >> 8, 0x000F000Fu, 0x43004300u), zx);
        a3 = bf16x2_sub(and_or(wd >> 12, 0x000F000Fu, 0x43004300u), zy);
    }
}

// w >> K on the FMA pipe: the high word of w * 2^(32 - K) (IMAD.HI.U32; ptxas keeps it, where it turns a
// shift-by-constant into SHF). The INT4 dequant's shifts and masks otherwise all take the ALU pipe, which
// on sm_90 retires 16 lanes a cycle per scheduler (64 a cycle per SM, half the FP32 rate), while the FMA pipe
// beside it is nearly idle in these kernels. Measured slower (docs/BENCHMARKS.md, session 38, H100: one row
// gate_up 32.7 -> 35.5 us, sixteen rows 42.0 -> 51.0, the 27B INT4 step 5.47 -> 5.86 ms): IMAD.HI does not
// issue at the rate SHF does, so the library keeps SHF; bench_qmv_variants keeps the forms (kQmvShrFma*).
template <int K>
__device__ __forceinline__ uint32_t shr_fma(uint32_t w) {
    return __umulhi(w, 1u << (32 - K));
}

// INT4 A fragment of k-tile kt as 128 + q in BF16 (exact): the zero point is subtracted after the multiply
// (quant_qmv.cuh), so a word of 8 weights costs 3 shifts and 4 lop3. SHR: how many of the three shifts run
// on the FMA pipe (shr_fma) instead of the ALU pipe: 0, 2 (by 4 and 12) or 3; the same bits either way.
template <int SHR = 0>
__device__ __forceinline__ void a_fragment_int4_raw(
    const uint4& qq, int kt, uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
    static_assert(SHR == 0 || SHR == 2 || SHR == 3, "SHR: 0, 2 or 3 shifts on the FMA pipe");
    const uint32_t wd = kt == 0 ? qq.x : kt == 1 ? qq.y : kt == 2 ? qq.z : qq.w;
    a0 = and_or(wd, 0x000F000Fu, 0x43004300u);
    a1 = and_or(SHR >= 2 ? shr_fma<4>(wd) : wd >> 4, 0x000F000Fu, 0x43004300u);
    a2 = and_or(SHR >= 3 ? shr_fma<8>(wd) : wd >> 8, 0x000F000Fu, 0x43004300u);
    a3 = and_or(SHR >= 2 ? shr_fma<12>(wd) : wd >> 12, 0x000F000Fu, 0x43004300u);
}

// The INT4 A fragment of k-tile kt in FP16, exact: rows g (a0, a2) hold 1024 + q and rows g + 8 (a1, a3)
// 1024 + 16 q. FP16's ten mantissa bits take a nibble at bits 4-7 of each half in place (0x6400 = 1024 with
// ulp 1), where BF16's seven cannot, so a word costs one shift and four lop3 against three and four; the
// factor 16 of rows g + 8 and both offsets are undone per scale group in fp32 (quant_qmv.cuh kQmvF16). The
// nibble to fragment map is a_fragment_int4_raw's, so the repacked layout is the same. SUB: rows g less 1024
// by two HSUB2 (FMA pipe), so they hold q itself: the fp32 sums then lose ~3 bits fewer to the offset's
// cancellation (1024 against |q - z| ~ 4, where BF16's 128 + q loses ~5 and rows g + 8's 64 + q ~4).
template <bool SUB = false>
__device__ __forceinline__ void a_fragment_int4_f16(
    const uint4& qq, int kt, uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
    const uint32_t wd = kt == 0 ? qq.x : kt == 1 ? qq.y : kt == 2 ? qq.z : qq.w, w8 = wd >> 8;
    a0 = and_or(wd, 0x000F000Fu, 0x64006400u);
    a1 = and_or(wd, 0x00F000F0u, 0x64006400u);
    a2 = and_or(w8, 0x000F000Fu, 0x64006400u);
    a3 = and_or(w8, 0x00F000F0u, 0x64006400u);
    if constexpr (SUB) {
        const __half2 k1024 = __halves2half2(__ushort_as_half(0x6400), __ushort_as_half(0x6400));
        __half2 h0 = __hsub2(*reinterpret_cast<const __half2*>(&a0), k1024);
        __half2 h2 = __hsub2(*reinterpret_cast<const __half2*>(&a2), k1024);
        a0 = *reinterpret_cast<const uint32_t*>(&h0), a2 = *reinterpret_cast<const uint32_t*>(&h2);
    }
}

// Two E4M3 values (bits 0-7 / 8-15 of p) as FP16x2 (low / high half): exact, subnormals included (E4M3's
// smallest, 2^-9, is a normal FP16); one cvt.rn.f16x2.e4m3x2 on sm_89+.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t p) {
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(p & 0xFFFFu), __NV_E4M3);
    return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}
// FP8 A fragment of k-tile kt in FP16 (quant_qmv.cuh kQmvF16 on FP8 weights), from a_fragment's layout (a0 /
// a1: bytes 0, 2 / 1, 3 of the word): one PRMT and one conversion a pair, where the BF16 form spends shifts,
// a lop3 and an HMUL2 by 2^120 (about 4.5 instructions a pair).
template <int VEC>
__device__ __forceinline__ void a_fragment_fp8_f16(
    const uint4 (&q)[VEC], int kt, uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
    const uint4& qq = q[kt >> 1];
    const uint32_t w0 = (kt & 1) ? qq.z : qq.x, w1 = (kt & 1) ? qq.w : qq.y;
    a0 = e4m3x2_to_f16x2(__byte_perm(w0, 0u, 0x20u));
    a1 = e4m3x2_to_f16x2(__byte_perm(w0, 0u, 0x31u));
    a2 = e4m3x2_to_f16x2(__byte_perm(w1, 0u, 0x20u));
    a3 = e4m3x2_to_f16x2(__byte_perm(w1, 0u, 0x31u));
}

// m16n8k16 with FP16 A and B, f32 accumulation (mma_bf16's twin); _first: no accumulator input.
__device__ __forceinline__ void mma_f16(
    float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_f16_first(
    float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}

// A BF16x2 word times 2^sh (mul = 2^sh in f32: exact) as FP16x2: exact for every value the FP16 range holds
// at that scale (quant_qmv.cuh kQmvF16 picks sh so the warp's largest |x| lands below 2^16).
__device__ __forceinline__ uint32_t bf16x2_to_f16x2_scaled(uint32_t w, float mul) {
    const __half2 h =
        __floats2half2_rn(__uint_as_float(w << 16) * mul, __uint_as_float(w & 0xFFFF0000u) * mul);
    return *reinterpret_cast<const uint32_t*>(&h);
}

// The sum of a BF16x2 word's two values in f32.
__device__ __forceinline__ float bf16x2_sum(uint32_t w) {
    return __uint_as_float(w << 16) + __uint_as_float(w & 0xFFFF0000u);
}

// A column block's running sums: acc (scaled) and cur (the current scale group's), [n-tile][token tile][4].
template <int NTW, int MT>
__device__ __forceinline__ void zero_acc(float (&acc)[NTW][MT][4], float (&cur)[NTW][MT][4]) {
#pragma unroll
    for (int j = 0; j < NTW; ++j)
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[j][m][e] = cur[j][m][e] = 0.0f;
}

// Column n of a one-row conv part (QmmParts::conv; C channels): conv1d_silu's step kernel for that channel, the
// same formula and order. Out of line: every qmm kernel stores through store_y, and inlined this doubled the
// kernels' code; it runs once per stored column, only in the launches that ask for it.
static __device__ __noinline__ void conv_store(void* out, int odt, const void* cw, int wdt, void* state, int sdt,
                                               int C, int n, float v) {
    constexpr int K = kQmmConvK;  // the models' 4 taps: the window stays in registers
    float rows[K], wc[K];
#pragma unroll
    for (int j = 0; j < K; ++j) wc[j] = ld(cw, wdt, static_cast<int64_t>(n) * K + j);
#pragma unroll
    for (int j = 0; j < K - 1; ++j) rows[j] = ld(state, sdt, static_cast<int64_t>(j) * C + n);
    rows[K - 1] = round_as(odt, v);
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) acc += wc[j] * rows[j];
    st(out, odt, n, acc * sigmoidf_(acc));
#pragma unroll
    for (int j = 0; j < K - 1; ++j) st(state, sdt, static_cast<int64_t>(j) * C + n, rows[j + 1]);
}

// y[tok][n], or its place in the part holding column n when the output is a stacked group's parts.
__device__ __forceinline__ void store_y(const Args& a, int tok, int n, float v) {
    if (a.parts.n == 0) {
        st(a.y, a.ydt, static_cast<int64_t>(tok) * a.N + n, v);
        return;
    }
    int p = 0;
    while (p + 1 < a.parts.n && n >= a.parts.col[p + 1]) ++p;
    const int c0 = a.parts.col[p], w = a.parts.col[p + 1] - c0;
    if (a.parts.conv && p == 0) {  // one row (QmmParts::conv): this column's conv step
        conv_store(a.parts.data[0], a.ydt, a.parts.conv_w, a.parts.conv_wdt, a.parts.conv_state, a.parts.conv_sdt, w,
                   n, v);
        return;
    }
    st(a.parts.data[p], a.ydt, static_cast<int64_t>(tok) * w + (n - c0), v);
}

// This warp's accumulators (n-tiles ntl.. of column block nb): y directly when the grid block did the whole
// column block, else the grid block's partial slot `pslot` (0: its range's first segment, 1: its last).
template <int CB, int NTW, int MT>
__device__ __forceinline__ void store_acc(const Args& a, const float (&acc)[NTW][MT][4], int nb, int ntl, bool whole,
                                          int pslot) {
    const int lane = static_cast<int>(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
    float* part = a.partials + (static_cast<int64_t>(blockIdx.x) * 2 + pslot) * a.M * CB;
#pragma unroll
    for (int j = 0; j < NTW; ++j) {
        if (nb * (CB / 16) + ntl + j >= a.NT) continue;
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int nl = (ntl + j) * 16 + g + (e >> 1) * 8;  // within the column block
                const int n = nb * CB + nl;
                const int tok = m * 8 + 2 * t + (e & 1);
                if (n >= a.N || tok >= a.M) continue;
                if (whole)
                    store_y(a, tok, n, acc[j][m][e]);
                else part[tok * CB + nl] = acc[j][m][e];
            }
    }
}

// A column block split between grid blocks (both qmm kernels): this block's partial is stored; each block
// arrives on the column block's counter and the last to arrive sums every part in grid-block order
// (deterministic), writes y and resets the counter for the next launch. Threads 0..nthr-1 of the block take
// part; `sync` is their barrier. Release / acquire the partials the way a grid barrier does: the block's stores
// are ordered before thread 0's fence and arrival by the barrier, and the summing threads' loads after its fence
// by the second one. One fence in one thread instead of one per thread (ncu: membar stalls).
template <int CB, class Sync>
__device__ __forceinline__ void finish_split(const Args& a, int nb, int& last_block, int* slot_table, int nthr,
                                             Sync sync) {
    const int KC = a.KC, B = static_cast<int>(gridDim.x), tid = static_cast<int>(threadIdx.x);
    sync();
    const int bf = block_of(nb * KC, a.W, B), bl = block_of((nb + 1) * KC - 1, a.W, B);
    if (tid == 0) {
        __threadfence();
        last_block = atomicAdd(&a.counters[nb], 1) == bl - bf;
        if (last_block) __threadfence();
    }
    sync();
    if (!last_block) return;
    // The partial slot of each contributing grid block, once, so the summing loop below is independent
    // 16-byte loads, four parts in flight per thread.
    const int nparts = bl - bf + 1;
    auto slot_of = [&](int q) { return (bf + q) * 2 + (range_start(bf + q, a.W, B) >= nb * KC ? 0 : 1); };
    for (int q = tid; q < min(nparts, kSlotTable); q += nthr) slot_table[q] = slot_of(q);
    sync();
    const int n0 = nb * CB;
    const int64_t pstride = static_cast<int64_t>(a.M) * CB;
    for (int i = tid; i < a.M * CB / 4; i += nthr) {
        const int tok = (i * 4) / CB, nl = i * 4 - tok * CB;
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        int q = 0;
        for (; q + 4 <= nparts; q += 4) {
            float4 v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int sl = q + u < kSlotTable ? slot_table[q + u] : slot_of(q + u);
                v[u] = __ldcg(reinterpret_cast<const float4*>(a.partials + sl * pstride + i * 4));
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) sum.x += v[u].x, sum.y += v[u].y, sum.z += v[u].z, sum.w += v[u].w;
        }
        for (; q < nparts; ++q) {
            const int sl = q < kSlotTable ? slot_table[q] : slot_of(q);
            const float4 v = __ldcg(reinterpret_cast<const float4*>(a.partials + sl * pstride + i * 4));
            sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
        }
        const float sv[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (n0 + nl + e < a.N) store_y(a, tok, n0 + nl + e, sv[e]);
    }
    if (tid == 0) a.counters[nb] = 0;
}

// GK: 0 when scale groups are whole chunks (group ends counted in chunks), 1 / 2 for groups of 16 / 32 channels.
template <bool FP8, int MT, bool ASYM, int GK>
__global__ void __launch_bounds__(kThreads, GRIMOIRE_QMM_MIN_BLOCKS > 0 ? GRIMOIRE_QMM_MIN_BLOCKS
                                             : (reg_weights(FP8) ? 2 : 3) + (MT == 1 ? 1 : 0))
    qmm_kernel(const Args a) {
    constexpr int VEC = vec(FP8);
    constexpr int S = stages(FP8);
    extern __shared__ __align__(16) uint4 smem_u4[];
    __shared__ int last_block;
    __shared__ int slot_table[kSlotTable];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int B = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    const int w0 = range_start(b, a.W, B), w1 = range_start(b + 1, a.W, B);
    const int KC = a.KC;
    const int cpg = a.G <= 1 ? KC : max(1, a.gs / 64);  // GK = 0: chunks per scale group
    char* ring = reinterpret_cast<char*>(smem_u4) + warp * S * a.stage;  // this warp's S stages
    QMM_TRACE(0);
#if GRIMOIRE_QMM_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    {
        const uint4* wb = reinterpret_cast<const uint4*>(a.words);
        int cb = w0 / KC, c0 = w0 - cb * KC;
        if (a.early) asm volatile("griddepcontrol.launch_dependents;");
        for (int i = 0; i < GRIMOIRE_QMM_PDL_PF && w0 + i < w1; ++i) {
#pragma unroll
            for (int j = 0; j < kNtPerWarp; ++j) {
                const int nt = min(cb * kNtPerBlock + warp * kNtPerWarp + j, a.NT - 1);
                const uint4* p = wb + (tile_index(nt, c0, a.NT, KC) * 32 + lane) * vec(FP8);
                asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
            }
            if (++c0 == KC) c0 = 0, ++cb;
        }
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    QMM_TRACE(1);

    // ---- issue side: step iw (column block icb, chunk ic) goes to stage islot, S - 1 steps ahead of the math.
    // What each lane copies is fixed per launch (x pieces) or per column block (scale / zero pieces): the
    // offsets are worked out once, so a step costs its copies and a few adds.
    const uint4* wbase = reinterpret_cast<const uint4*>(a.words);
    const uint4* src[kNtPerWarp];
    int iw = w0, icb = w0 / KC, ic = w0 - icb * KC, islot = 0;
    int ig = 0, irem = 0;  // first scale group of chunk ic; GK = 0: chunks left in it
    // x: piece i = lane + 32 r (row i / 8, 16 bytes at channel 8 (i % 8)) of each chunk.
    constexpr int XR = (MT * 8 * 8 + 31) / 32;
    int xsrc[XR], xdst[XR];
#pragma unroll
    for (int r = 0; r < XR; ++r) {
        const int i = lane + 32 * r;
        xsrc[r] = i < a.M * 8 ? (i >> 3) * a.ldx + (i & 7) * 8 : -1;
        xdst[r] = a.xoff + (i >> 3) * kXRow + (i & 7) * 16;
    }
    // INT4 scales: piece p = lane + 32 r (16 bytes of rows r0.. of group grp); zeros: piece lane (16 rows).
    // FP8 scales: rows lane and lane + 32 of every group, 4 bytes each.
    int64_t soffs[2] = {0, 0};  // byte offset of the piece in a scale row (INT4) / scale row offset (FP8)
    int sdst[2] = {0, 0}, sgrp[2] = {0, 0};
    bool sfull[2] = {false, false}, son[2] = {false, false};
    int64_t zoffs = 0;
    bool zfull = false;
    auto point = [&]() {  // pointers for chunk ic of column block icb
        const int n0w = (icb * kNtPerBlock + warp * kNtPerWarp) * 16;
        if constexpr (!reg_weights(FP8)) {  // register weights keep their own cursor (load_regs)
#pragma unroll
            for (int j = 0; j < kNtPerWarp; ++j) {
                const int nt = min(icb * kNtPerBlock + warp * kNtPerWarp + j, a.NT - 1);  // past N: read, never stored
                src[j] = wbase + (tile_index(nt, ic, a.NT, KC) * 32 + lane) * VEC;
            }
        }
        if constexpr (GK == 0) {
            ig = a.G <= 1 ? 0 : ic / cpg;
            irem = cpg - ic % cpg;
        } else {
            ig = ic * a.gpc;
        }
        if constexpr (FP8) {
#pragma unroll
            for (int h = 0; h < 2; ++h) soffs[h] = static_cast<int64_t>(min(n0w + lane + 32 * h, a.N - 1) / a.bn) * a.SG;
        } else {
            const int lg = a.ssz == 2 ? 3 : 4, rs = a.ssz == 2 ? 3 : 2;  // pieces per group, rows per piece (log2)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int p = lane + 32 * r;
                son[r] = p < (a.gpc << lg);
                sgrp[r] = p >> lg;
                const int r0 = (p & ((1 << lg) - 1)) << rs, row = n0w + r0;
                sfull[r] = son[r] && row < a.NP;
                soffs[r] = static_cast<int64_t>(sfull[r] ? row : 0) * a.ssz;
                sdst[r] = a.soff + (sgrp[r] * 64 + r0) * a.ssz;
            }
            if constexpr (ASYM) {
                const int row = n0w + (lane & 3) * 16;
                zfull = lane < a.gpc * 4 && row < a.NP;
                zoffs = zfull ? row : 0;
            }
        }
    };
    point();
    auto issue = [&]() {
        if (iw < w1) {
            char* st = ring + islot * a.stage;
            if constexpr (!reg_weights(FP8)) {  // register weights are loaded below
#pragma unroll
                for (int j = 0; j < kNtPerWarp; ++j) cp_async16(st + (j * 32 + lane) * 16, src[j]);
            }
            const int k0 = ic * 64;
#pragma unroll
            for (int r = 0; r < XR; ++r) {
                if (xsrc[r] >= 0) {
                    const bool full = k0 + ((lane + 32 * r) & 7) * 8 < a.ldx;  // zeros past the (8-padded) row
                    cp_async16z(st + xdst[r], a.x + (full ? xsrc[r] + k0 : 0), full);
                }
            }
            if constexpr (FP8) {
                const float* sc = static_cast<const float*>(a.scales);
                for (int grp = 0; grp < a.gpc; ++grp) {
                    const int gi = min(ig + grp, a.G - 1);
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        cp_async4(st + a.soff + (grp * 64 + lane + 32 * h) * 4, sc + soffs[h] + gi);
                }
            } else {
                const char* s0 = static_cast<const char*>(a.scales);
                const int64_t rowb = static_cast<int64_t>(a.NP) * a.ssz;  // bytes per scale row (group)
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    if (son[r])
                        cp_async16z(st + sdst[r], s0 + (sfull[r] ? min(ig + sgrp[r], a.G - 1) * rowb + soffs[r] : 0),
                                    sfull[r]);
                if constexpr (ASYM) {
                    if (lane < a.gpc * 4)
                        cp_async16z(st + a.zoff + (lane >> 2) * 64 + (lane & 3) * 16,
                                    a.zeros + (zfull ? static_cast<int64_t>(min(ig + (lane >> 2), a.G - 1)) * a.NP + zoffs : 0),
                                    zfull);
                }
            }
            ++iw;
            if (++ic == KC) {
                ic = 0;
                ++icb;
                if (iw < w1) point();
            } else {
                if constexpr (!reg_weights(FP8)) {
#pragma unroll
                    for (int j = 0; j < kNtPerWarp; ++j) src[j] += static_cast<int64_t>(a.NT) * 32 * VEC;  // next chunk
                }
                if constexpr (GK == 0) {
                    if (--irem == 0) ++ig, irem = cpg;
                } else {
                    ig += a.gpc;
                }
            }
        }
        cp_async_commit();  // an empty group past the range keeps the wait count uniform
        islot = islot + 1 == S ? 0 : islot + 1;
    };
#pragma unroll
    for (int s = 0; s < S - 1; ++s) issue();

    bool row_ok[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) row_ok[m] = m * 8 + g < a.M;

    // FP8 moves twice the bytes per dequant instruction, and the round trip through shared memory then
    // saturates the MIO pipe (ncu: short-scoreboard and MIO-throttle stalls), so its weights are loaded straight
    // into registers one step ahead instead: wcur holds step w, wnext step w + 1.
    uint4 wcur[kNtPerWarp][VEC], wnext[kNtPerWarp][VEC];
    // The loads walk the block's steps in order from w0: column block rcb, chunk rc of step rv.
    int rv = w0, rcb = w0 / KC, rc = w0 - rcb * KC;
    auto load_regs = [&](uint4 (&dst)[kNtPerWarp][VEC]) {  // the weights of step rv, then the next step
        if (rv >= w1) return;
#pragma unroll
        for (int j = 0; j < kNtPerWarp; ++j) {
            const int nt = min(rcb * kNtPerBlock + warp * kNtPerWarp + j, a.NT - 1);
            const uint4* p = wbase + (tile_index(nt, rc, a.NT, KC) * 32 + lane) * VEC;
#pragma unroll
            for (int u = 0; u < VEC; ++u) dst[j][u] = ld_stream(p + u);
        }
        ++rv;
        if (++rc == KC) rc = 0, ++rcb;
    };
    if constexpr (reg_weights(FP8)) load_regs(wcur);

    int cslot = 0;  // ring stage of step w
    int w = w0;
    while (w < w1) {
        const int nb = w / KC;
        const int seg_begin = w, seg_end = min(w1, (nb + 1) * KC);

        float acc[kNtPerWarp][MT][4], cur[kNtPerWarp][MT][4];
        zero_acc(acc, cur);

        int c = w - nb * KC;
        int rem = cpg - c % cpg;  // GK = 0: chunks left in the current scale group

        for (; w < seg_end; ++w, ++c) {
            issue();
            cp_async_wait<S - 1>();  // this lane's copies of step w have landed
            __syncwarp();            // and so have the x / scale pieces the other lanes copied
            if (w == w0) QMM_TRACE(2);
            const char* st = ring + cslot * a.stage;
            cslot = cslot + 1 == S ? 0 : cslot + 1;

            uint4 q[kNtPerWarp][VEC];
            if constexpr (reg_weights(FP8)) {
                load_regs(wnext);  // step w + 1
#pragma unroll
                for (int j = 0; j < kNtPerWarp; ++j)
#pragma unroll
                    for (int v = 0; v < VEC; ++v) q[j][v] = wcur[j][v], wcur[j][v] = wnext[j][v];
            } else {
#pragma unroll
                for (int j = 0; j < kNtPerWarp; ++j) q[j][0] = *reinterpret_cast<const uint4*>(st + (j * 32 + lane) * 16);
            }

            // Scale group grp of this chunk: the fp32 scales of rows g and g + 8 of n-tile j.
            // Scale group grp of this chunk: acc += s * cur with the fp32 scales of rows g and g + 8 of n-tile j
            // (the scale dtype branch is uniform and taken once per flush).
            auto flush_as = [&](int grp, auto tag) {
                using T = decltype(tag);
                const T* sp = reinterpret_cast<const T*>(st + a.soff) + grp * 64 + g;
#pragma unroll
                for (int j = 0; j < kNtPerWarp; ++j) {
                    float s_lo, s_hi;
                    if constexpr (sizeof(T) == 4) {
                        s_lo = sp[j * 16], s_hi = sp[j * 16 + 8];
                    } else if constexpr (std::is_same_v<T, __half>) {
                        s_lo = __half2float(sp[j * 16]), s_hi = __half2float(sp[j * 16 + 8]);
                    } else {
                        s_lo = __bfloat162float(sp[j * 16]), s_hi = __bfloat162float(sp[j * 16 + 8]);
                    }
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
                        acc[j][m][0] += cur[j][m][0] * s_lo;
                        acc[j][m][1] += cur[j][m][1] * s_lo;
                        acc[j][m][2] += cur[j][m][2] * s_hi;
                        acc[j][m][3] += cur[j][m][3] * s_hi;
                        cur[j][m][0] = cur[j][m][1] = cur[j][m][2] = cur[j][m][3] = 0.0f;
                    }
                }
            };
            auto flush = [&](int grp) {
                if (FP8 || a.sdt == kF32) flush_as(grp, 0.0f);
                else if (a.sdt == kF16) flush_as(grp, __half{});
                else flush_as(grp, __nv_bfloat16{});
            };
            uint2 zp[kNtPerWarp];  // BF16x2 of 128 + z for rows g (x) and g + 8 (y)
            auto load_zeros = [&](int grp) {
#pragma unroll
                for (int j = 0; j < kNtPerWarp; ++j) {
                    if constexpr (ASYM) {
                        const uint8_t* zr = reinterpret_cast<const uint8_t*>(st + a.zoff + grp * 64 + j * 16 + g);
                        zp[j] = make_uint2((0x4300u + zr[0]) * 0x10001u, (0x4300u + zr[8]) * 0x10001u);
                    } else {
                        zp[j] = make_uint2(0x43084308u, 0x43084308u);
                    }
                }
            };
            load_zeros(0);

#pragma unroll
            for (int kt = 0; kt < 4; ++kt) {
                if constexpr (GK > 0 && ASYM) {
                    if (kt > 0 && kt % GK == 0) load_zeros(kt / GK);
                }
                uint32_t b0[MT], b1[MT];
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    b0[m] = b1[m] = 0u;
                    if (row_ok[m]) {
                        const char* xr = st + a.xoff + (m * 8 + g) * kXRow + (kt * 16 + 2 * t) * 2;
                        b0[m] = *reinterpret_cast<const uint32_t*>(xr);
                        b1[m] = *reinterpret_cast<const uint32_t*>(xr + 16);
                    }
                }
#pragma unroll
                for (int j = 0; j < kNtPerWarp; ++j) {
                    uint32_t a0, a1, a2, a3;
                    a_fragment<FP8>(q[j], kt, zp[j].x, zp[j].y, a0, a1, a2, a3);
#pragma unroll
                    for (int m = 0; m < MT; ++m) mma_bf16(cur[j][m], a0, a1, a2, a3, b0[m], b1[m]);
                }
                if constexpr (GK > 0) {
                    if ((kt + 1) % GK == 0) flush(kt / GK);
                }
            }
            if constexpr (GK == 0) {
                if (--rem == 0 || w + 1 == seg_end) {  // group end, or the segment ends inside the group
                    flush(0);
                    rem = cpg;
                }
            }
        }

        // ---- this column block: written directly when this grid block did all of it, else a partial.
        if (w == w1) {  // the block's last chunk is done: the next grid may launch and prefetch during our tail
            QMM_TRACE(3);
#if GRIMOIRE_QMM_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            asm volatile("griddepcontrol.launch_dependents;");
#endif
        }
        const bool whole = seg_begin == nb * KC && seg_end == (nb + 1) * KC;
        store_acc<kColBlock>(a, acc, nb, warp * kNtPerWarp, whole, seg_begin == w0 ? 0 : 1);
        if (whole) continue;
        finish_split<kColBlock>(a, nb, last_block, slot_table, kThreads, [] { __syncthreads(); });
    }
    cp_async_wait<0>();
    QMM_TRACE(4);
}

int device_sms();  // cached multiprocessor count of the current device

}  // namespace grimoire::cuda::qmm
