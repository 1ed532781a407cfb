// The quantized-weight x activation kernel for M = 1..16 rows, instantiated by qmm.cu.
//
// Shape of the work: the weight is the mma A operand (16 output features x 16 channels per tile, see
// quant/repack.h for the fragment-ordered layout), the activations the B operand (16 channels x 8 tokens;
// two token tiles for M > 8). Decode is weight-bandwidth-bound, so everything is arranged around streaming the
// packed weight once at full speed:
//   * block = 4 warps x 4 n-tiles = 256 output features ("column block"); the work is the list of
//     (column block, batch of U chunks of 64 channels) in column-block-major order, and it is cut into as many
//     equal contiguous ranges as blocks fit on the GPU at once (stream-K): one wave, every SM equally loaded
//     whatever N and K are. A column block whose batches fall to one grid block is written directly; one
//     split between grid blocks is summed from their partials;
//   * each lane issues its first 16-byte no-L1-allocate weight loads (U chunks x 4 n-tiles) before anything
//     else, and from then on keeps the next batch in flight while it computes on the current one;
//   * the block stages its K range of x (the M rows, BF16, act-order gather applied) in shared memory once;
//     rows are padded by 16 bytes so the B-fragment loads of the 8 token rows hit different banks; fragment
//     rows past M read as zeros without touching shared memory;
//   * indices in the hot loop are 32-bit and group boundaries are tracked incrementally (no divisions);
//   * dequant in registers: INT4 nibbles become BF16 128 + q with one LOP3 (the 0x4300 exponent trick) and
//     then q - z with one HSUB2, exact; FP8 E4M3 bytes are moved into BF16 bit positions and multiplied by
//     2^120 (exact, subnormals included). The group scale is applied in fp32 to the mma result of each group,
//     so y = sum_g s_g * sum_k (q - z) x exactly as the format defines W, with fp32 accumulation;
//   * partials go to a workspace ([grid block][first / last segment][M][256]); the last grid block to arrive for
//     a column block (atomic counter) sums them in grid-block order (deterministic) and writes y, then resets
//     the counter for the next launch.
#pragma once
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant.h"

// Blocks per SM the register allocation must allow: 3 for one token tile (~160 registers, no spills), 2 for
// two (the accumulators double). GRIMOIRE_QMM_MIN_BLOCKS overrides both (benchmark variants).
#ifndef GRIMOIRE_QMM_MIN_BLOCKS
#define GRIMOIRE_QMM_MIN_BLOCKS 0
#endif

namespace grimoire::cuda::qmm {

constexpr int kWarps = 4;
constexpr int kNtPerWarp = 4;  // n-tiles per warp: shares each B fragment and the per-k-tile bookkeeping
constexpr int kNtPerBlock = kWarps * kNtPerWarp;  // 256 output features
constexpr int kThreads = 32 * kWarps;
constexpr int kSmemBytes = 40 * 1024;
constexpr int kXPad = 8;  // bf16 elements of padding per staged x row
constexpr int kColBlock = kNtPerBlock * 16;

// Chunks per batch (chunks in flight per lane; two batches are in flight).
#ifndef GRIMOIRE_QMM_INT4_CHUNKS
#define GRIMOIRE_QMM_INT4_CHUNKS 2
#endif
constexpr int batch_chunks(bool fp8) { return fp8 ? 1 : GRIMOIRE_QMM_INT4_CHUNKS; }
// Batches whose x (M rows) fits the staging buffer at once.
constexpr int max_batches(int M, bool fp8) { return (kSmemBytes / (M * 2) - kXPad) / (64 * batch_chunks(fp8)); }

struct Args {
    const uint32_t* words;
    const void* scales;    // INT4: [G][NP] of ST; FP8: f32 [SN][SG]
    const uint8_t* zeros;  // INT4 asymmetric: [G][NP]
    const int32_t* perm;   // [K] or null
    const void* x;
    int xdt;
    void* y;
    int ydt;
    float* partials;  // [gridDim.x][2][M][kColBlock]
    int* counters;    // [column blocks]
    int64_t N, K, NT, KC, G, gs;  // gs: channels per scale group along K
    int64_t NP;                   // INT4: padded N (scale row stride)
    int64_t bn, SG;               // FP8 scale grid
    int M;
    int BPN, W;                   // batches per column block, total batches (column blocks x BPN)
};

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void mma_bf16(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
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

// Loads batch w (chunks [bi * U, bi * U + U) of column block nb) of the warp's two n-tiles; zeros past KC, past
// the last n-tile or past the block's range.
template <int U, int VEC>
__device__ __forceinline__ void load_batch(uint4 (&wr)[U][kNtPerWarp][VEC], const Args& a, int w, int w_end,
                                           int warp, int lane) {
    const int nb = w / a.BPN, c = (w - nb * a.BPN) * U, KC = static_cast<int>(a.KC);
    const int64_t nt0 = static_cast<int64_t>(nb) * kNtPerBlock + warp * kNtPerWarp;
    const uint4* wbase = reinterpret_cast<const uint4*>(a.words);
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
        for (int j = 0; j < kNtPerWarp; ++j)
#pragma unroll
            for (int v = 0; v < VEC; ++v) {
                if (w < w_end && c + u < KC && nt0 + j < a.NT)
                    wr[u][j][v] = ld_stream(wbase + (((nt0 + j) * KC + c + u) * 32 + lane) * VEC + v);
                else
                    wr[u][j][v] = make_uint4(0, 0, 0, 0);
            }
}

__device__ __forceinline__ int range_start(int b, int W, int B) {
    return static_cast<int>(static_cast<int64_t>(b) * W / B);
}
// The grid block whose range holds batch w.
__device__ __forceinline__ int block_of(int w, int W, int B) {
    int b = static_cast<int>(static_cast<int64_t>(w) * B / W);
    while (b + 1 < B && range_start(b + 1, W, B) <= w) ++b;
    while (b > 0 && range_start(b, W, B) > w) --b;
    return b;
}

// Stages x[0..M) x channels [k0, k1) as BF16 at xs (zeros past K).
__device__ __forceinline__ void stage_x(const Args& a, uint16_t* xs, int ldx, int64_t k0, int64_t k1) {
    const int len = static_cast<int>(k1 - k0);
    if (a.xdt == kBF16 && a.perm == nullptr && (a.K & 7) == 0 && (reinterpret_cast<uintptr_t>(a.x) & 15) == 0) {
        const int vecs = len / 8, total = a.M * vecs;
        const uint16_t* x = static_cast<const uint16_t*>(a.x);
        for (int i0 = threadIdx.x; i0 < total; i0 += 4 * kThreads) {
            uint4 v[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {  // four independent loads in flight per thread
                const int i = i0 + q * kThreads;
                v[q] = make_uint4(0, 0, 0, 0);
                if (i < total) {
                    const int r = i / vecs;
                    const int64_t k = k0 + (i - r * vecs) * 8;
                    if (k < a.K) v[q] = *reinterpret_cast<const uint4*>(x + r * a.K + k);
                }
            }
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int i = i0 + q * kThreads;
                if (i < total) {
                    const int r = i / vecs;
                    *reinterpret_cast<uint4*>(&xs[r * ldx + (i - r * vecs) * 8]) = v[q];
                }
            }
        }
    } else {
        const int half = len / 2;
        for (int i = threadIdx.x; i < a.M * half; i += kThreads) {
            const int r = i / half, kk = (i - r * half) * 2;
            const int64_t k = k0 + kk;
            float v0 = 0.0f, v1 = 0.0f;
            if (k < a.K) v0 = ld(a.x, a.xdt, r * a.K + (a.perm ? a.perm[k] : k));
            if (k + 1 < a.K) v1 = ld(a.x, a.xdt, r * a.K + (a.perm ? a.perm[k + 1] : k + 1));
            *reinterpret_cast<__nv_bfloat162*>(&xs[r * ldx + kk]) = __floats2bfloat162_rn(v0, v1);
        }
    }
}

// FP8 = true: 2 uint4 per lane per chunk; INT4: 1.
template <bool FP8, int MT, bool ASYM, class ST>
__global__ void __launch_bounds__(kThreads, GRIMOIRE_QMM_MIN_BLOCKS > 0 ? GRIMOIRE_QMM_MIN_BLOCKS : (MT == 1 ? 3 : 2))
    qmm_kernel(const Args a) {
    constexpr int VEC = FP8 ? 2 : 1;
    constexpr int U = batch_chunks(FP8);
    extern __shared__ __align__(16) unsigned char smem_raw[];
    uint16_t* xs = reinterpret_cast<uint16_t*>(smem_raw);  // [M][staged channels + kXPad] bf16 bits
    __shared__ int last_block;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int B = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    const int w0 = range_start(b, a.W, B), w1 = range_start(b + 1, a.W, B);
    const int KC = static_cast<int>(a.KC);
    const int maxb = max_batches(a.M, FP8);
    const int ldx = maxb * U * 64 + kXPad;
    const int gs = static_cast<int>(a.gs < (1 << 30) ? a.gs : (1 << 30));
    const int G = static_cast<int>(a.G);
    bool row_ok[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) row_ok[m] = m * 8 + g < a.M;

    // The first weight batch goes out before anything else: HBM streaming starts while x is staged.
    uint4 wr[U][kNtPerWarp][VEC];
    load_batch<U, VEC>(wr, a, w0, w1, warp, lane);

    int w = w0;
    while (w < w1) {
        const int nb = w / a.BPN;
        const int seg_begin = w, seg_end = min(w1, (nb + 1) * a.BPN);
        const int64_t nt0 = static_cast<int64_t>(nb) * kNtPerBlock + warp * kNtPerWarp;
        bool valid[kNtPerWarp];
#pragma unroll
        for (int j = 0; j < kNtPerWarp; ++j) valid[j] = nt0 + j < a.NT;

        float acc[kNtPerWarp][MT][4], cur[kNtPerWarp][MT][4];
#pragma unroll
        for (int j = 0; j < kNtPerWarp; ++j)
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[j][m][e] = cur[j][m][e] = 0.0f;
        // Current scale group (rows g and g + 8 of each n-tile; INT4 asym: BF16x2 of 128 + z), tracked by its
        // end channel so the hot loop has no division.
        int grp = -1, grp_end = 0;
        float s_lo[kNtPerWarp], s_hi[kNtPerWarp];
        uint32_t z_lo[kNtPerWarp], z_hi[kNtPerWarp];
#pragma unroll
        for (int j = 0; j < kNtPerWarp; ++j) s_lo[j] = s_hi[j] = 0.0f, z_lo[j] = z_hi[j] = 0x43084308u;  // 128+8

        auto flush = [&]() {
#pragma unroll
            for (int j = 0; j < kNtPerWarp; ++j)
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    acc[j][m][0] += cur[j][m][0] * s_lo[j];
                    acc[j][m][1] += cur[j][m][1] * s_lo[j];
                    acc[j][m][2] += cur[j][m][2] * s_hi[j];
                    acc[j][m][3] += cur[j][m][3] * s_hi[j];
                    cur[j][m][0] = cur[j][m][1] = cur[j][m][2] = cur[j][m][3] = 0.0f;
                }
        };
        auto load_group = [&](int gi) {
#pragma unroll
            for (int j = 0; j < kNtPerWarp; ++j) {
                if (!valid[j]) continue;
                const int n = static_cast<int>((nt0 + j) * 16) + g;
                if constexpr (FP8) {
                    const int N = static_cast<int>(a.N), bn = static_cast<int>(a.bn), SG = static_cast<int>(a.SG);
                    const int nlo = min(n, N - 1), nhi = min(n + 8, N - 1);
                    s_lo[j] = static_cast<const float*>(a.scales)[(nlo / bn) * SG + gi];
                    s_hi[j] = static_cast<const float*>(a.scales)[(nhi / bn) * SG + gi];
                } else {
                    const int64_t row = static_cast<int64_t>(gi) * a.NP + n;
                    s_lo[j] = load_scale<ST>(a.scales, row);
                    s_hi[j] = load_scale<ST>(a.scales, row + 8);
                    if constexpr (ASYM) {
                        const uint32_t zl = 0x4300u + a.zeros[row], zh = 0x4300u + a.zeros[row + 8];
                        z_lo[j] = zl | (zl << 16);
                        z_hi[j] = zh | (zh << 16);
                    }
                }
            }
        };

        while (w < seg_end) {
            // Stage x for the next run of batches of this column block.
            const int sub_end = min(seg_end, w + maxb);
            const int c_first = (w - nb * a.BPN) * U;
            const int64_t k0 = static_cast<int64_t>(c_first) * 64;
            const int64_t k1 = static_cast<int64_t>(min(KC, (sub_end - nb * a.BPN) * U)) * 64;
            __syncthreads();  // every warp is done with the previous staging
            stage_x(a, xs, ldx, k0, k1);
            __syncthreads();
            for (; w < sub_end; ++w) {
                uint4 nx[U][kNtPerWarp][VEC];
                load_batch<U, VEC>(nx, a, w + 1, w1, warp, lane);

                const int c = (w - nb * a.BPN) * U;
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    if (c + u >= KC) break;
#pragma unroll
                    for (int kt = 0; kt < 4; ++kt) {
                        const int kg = (c + u) * 64 + kt * 16;
                        if (kg >= grp_end) {
                            if (grp >= 0) flush();
                            grp = min(kg / gs, G - 1);
                            grp_end = grp == G - 1 ? (1 << 30) : (grp + 1) * gs;
                            load_group(grp);
                        }
                        const int kl = kg - c_first * 64;
                        uint32_t bf[MT][2];
#pragma unroll
                        for (int m = 0; m < MT; ++m) {
                            if (row_ok[m]) {
                                const uint16_t* row = xs + (m * 8 + g) * ldx + kl + 2 * t;
                                bf[m][0] = *reinterpret_cast<const uint32_t*>(row);
                                bf[m][1] = *reinterpret_cast<const uint32_t*>(row + 8);
                            } else {
                                bf[m][0] = bf[m][1] = 0u;
                            }
                        }
#pragma unroll
                        for (int j = 0; j < kNtPerWarp; ++j) {
                            uint32_t a0, a1, a2, a3;
                            if constexpr (FP8) {
                                const uint4& q = wr[u][j][kt >> 1];
                                const uint32_t w0x = (kt & 1) ? q.z : q.x, w1x = (kt & 1) ? q.w : q.y;
                                a0 = bf16x2_mul(fp8x2_to_bf16x2_scaled(w0x), kBf16x2Pow120);
                                a1 = bf16x2_mul(fp8x2_to_bf16x2_scaled(w0x >> 8), kBf16x2Pow120);
                                a2 = bf16x2_mul(fp8x2_to_bf16x2_scaled(w1x), kBf16x2Pow120);
                                a3 = bf16x2_mul(fp8x2_to_bf16x2_scaled(w1x >> 8), kBf16x2Pow120);
                            } else {
                                const uint4& q = wr[u][j][0];
                                const uint32_t wd = kt == 0 ? q.x : kt == 1 ? q.y : kt == 2 ? q.z : q.w;
                                a0 = bf16x2_sub(and_or(wd, 0x000F000Fu, 0x43004300u), z_lo[j]);
                                a1 = bf16x2_sub(and_or(wd >> 4, 0x000F000Fu, 0x43004300u), z_hi[j]);
                                a2 = bf16x2_sub(and_or(wd >> 8, 0x000F000Fu, 0x43004300u), z_lo[j]);
                                a3 = bf16x2_sub(and_or(wd >> 12, 0x000F000Fu, 0x43004300u), z_hi[j]);
                            }
#pragma unroll
                            for (int m = 0; m < MT; ++m) mma_bf16(cur[j][m], a0, a1, a2, a3, bf[m][0], bf[m][1]);
                        }
                    }
                }
#pragma unroll
                for (int u = 0; u < U; ++u)
#pragma unroll
                    for (int j = 0; j < kNtPerWarp; ++j)
#pragma unroll
                        for (int v = 0; v < VEC; ++v) wr[u][j][v] = nx[u][j][v];
            }
        }
        if (grp >= 0) flush();

        // ---- this column block: written directly when this grid block did all of it, else a partial.
        const bool whole = seg_begin == nb * a.BPN && seg_end == (nb + 1) * a.BPN;
        const int slot = seg_begin == w0 ? 0 : 1;
        float* part = a.partials + (static_cast<int64_t>(b) * 2 + slot) * a.M * kColBlock;
#pragma unroll
        for (int j = 0; j < kNtPerWarp; ++j) {
            if (!valid[j]) continue;
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int nl = (warp * kNtPerWarp + j) * 16 + g + (e >> 1) * 8;  // within the column block
                    const int64_t n = static_cast<int64_t>(nb) * kColBlock + nl;
                    const int tok = m * 8 + 2 * t + (e & 1);
                    if (n >= a.N || tok >= a.M) continue;
                    if (whole) st(a.y, a.ydt, tok * a.N + n, acc[j][m][e]);
                    else part[tok * kColBlock + nl] = acc[j][m][e];
                }
        }
        if (whole) continue;
        __threadfence();
        __syncthreads();
        const int bf = block_of(nb * a.BPN, a.W, B), bl = block_of((nb + 1) * a.BPN - 1, a.W, B);
        if (threadIdx.x == 0) last_block = atomicAdd(&a.counters[nb], 1) == bl - bf;
        __syncthreads();
        if (!last_block) continue;
        __threadfence();
        // Partial slot of each contributing grid block, once (the staging buffer is free until the next
        // segment's __syncthreads), so the summing loop below is plain independent loads.
        int* slots = reinterpret_cast<int*>(xs);
        const int nparts = bl - bf + 1;
        for (int q = threadIdx.x; q < nparts; q += kThreads)
            slots[q] = (bf + q) * 2 + (range_start(bf + q, a.W, B) >= nb * a.BPN ? 0 : 1);
        __syncthreads();
        const int64_t n0 = static_cast<int64_t>(nb) * kColBlock;
        for (int i = threadIdx.x; i < a.M * kColBlock; i += kThreads) {
            const int tok = i / kColBlock, nl = i - tok * kColBlock;
            if (n0 + nl >= a.N) continue;
            float sum = 0.0f;
#pragma unroll 8
            for (int q = 0; q < nparts; ++q)
                sum += __ldcg(a.partials + (static_cast<int64_t>(slots[q]) * a.M + tok) * kColBlock + nl);
            st(a.y, a.ydt, tok * a.N + n0 + nl, sum);
        }
        if (threadIdx.x == 0) a.counters[nb] = 0;
    }
}

int device_sms();  // cached multiprocessor count of the current device

}  // namespace grimoire::cuda::qmm
