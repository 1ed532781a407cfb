// Dequantization kernels of a repacked INT4 / FP8 weight to a dense BF16 [N, K] matrix (F32 for the F32
// reference mode) for the prefill path: a cuBLAS GEMM follows, and at M >= 512 its compute dominates this
// extra pass. Each lane decodes the same fragment positions the qmm kernel reads, so both paths share the
// layout and its tests. Values are rounded once, to BF16, from the exact fp32 product (q - z) * s.
// quant_dequant.cu launches them; the per-chunk device functions are separate so that benchmark variants
// (other chunk-to-warp mappings) decode exactly the same way.
#pragma once
#include <type_traits>

#include "kernels/cuda/quant_mma.cuh"
#include "quant/tile_layout.h"

namespace grimoire::cuda::dq {

// One warp per 16 x 64 chunk: each lane decodes its fragment values into a shared [16][64] tile, then the
// warp writes the tile row by row with 16-byte stores (each output row segment is 128 contiguous bytes).
// Warps walk the chunks along K first, so a block writes 1 KB runs of each of its 16 rows; walking them in
// storage order (down N first) put every 128-byte write in its own DRAM row (H200, 34816 x 5120 INT4 to BF16:
// 161 -> 138 us). Act-order weights (perm) or K % 8 != 0 take scalar stores.
constexpr int kDqWarps = 8;
constexpr int kTileLd = 64 + 8;  // padded row (elements) of the per-warp tile

template <class OT>
__device__ __forceinline__ void store_tile(
    const OT* tile, OT* out, int64_t nt, int64_t c, int64_t N, int64_t K, const int32_t* perm, int lane) {
    __syncwarp();
    constexpr int per16 = 16 / sizeof(OT);  // elements per 16-byte store
    const bool vec = perm == nullptr && K % per16 == 0;
    for (int i = lane; i < 16 * (64 / per16); i += 32) {
        const int r = i / (64 / per16), part = i % (64 / per16);
        const int64_t n = nt * 16 + r, k0 = c * 64 + part * per16;
        if (n >= N || k0 >= K) continue;
        const OT* src = tile + r * kTileLd + part * per16;
        if (vec && k0 + per16 <= K) {
            *reinterpret_cast<uint4*>(out + n * K + k0) = *reinterpret_cast<const uint4*>(src);
        } else {
            for (int e = 0; e < per16 && k0 + e < K; ++e)
                out[n * K + (perm ? perm[k0 + e] : k0 + e)] = src[e];
        }
    }
}

// (q - z) pairs as BF16x2 (exact, from the LOP3 trick of quant_mma.cuh) or FP8 pairs as BF16x2 / 2^120, times
// the fp32 scale, rounded once to BF16 and stored as one 32-bit pair: columns col, col + 1 of tile row r.
__device__ __forceinline__ void put_pair(
    __nv_bfloat16* tile, int r, int col, uint32_t pair, float s, float pre) {
    const float lo = __uint_as_float(pair << 16) * pre, hi = __uint_as_float(pair & 0xFFFF0000u) * pre;
    *reinterpret_cast<__nv_bfloat162*>(tile + r * kTileLd + col) = __floats2bfloat162_rn(lo * s, hi * s);
}

// Channels [c * 64 + kt * 16, +16) lie in one scale group (group sizes are multiples of 16, repack.h).
__device__ __forceinline__ int group_of(int64_t c, int kt, int64_t gs, int64_t G) {
    return static_cast<int>(
        min((static_cast<int>(c) * 64 + kt * 16) / static_cast<int>(gs), static_cast<int>(G) - 1));
}

// The lane's 16 bytes of chunk (nt, c) of an INT4 weight.
__device__ __forceinline__ uint4 int4_chunk_words(const Int4Dev& w, int64_t nt, int64_t c, int lane) {
    return reinterpret_cast<const uint4*>(w.words)[tile_index(nt, c, w.NT, w.KC) * 32 + lane];
}

// One warp decodes chunk (nt, c) from its lanes' words q into its tile and writes the tile to out.
template <class ST, class OT>
__device__ __forceinline__ void dequant_int4_chunk(
    const Int4Dev& w, OT* __restrict__ out, OT* tile, int64_t nt, int64_t c, uint4 q, int lane) {
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    const int64_t NP = w.NT * 16;
    const int g = lane >> 2, t = lane & 3;
    const bool pc = chunk_permuted(w.group_size, w.G);  // tile column = channel of the k-slot
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {
        const int64_t lo = group_of(c, kt, w.group_size, w.G) * NP + nt * 16 + g;
        const float s_lo = qmm::load_scale<ST>(w.scales, lo), s_hi = qmm::load_scale<ST>(w.scales, lo + 8);
        const int z_lo = w.zeros ? w.zeros[lo] : 8, z_hi = w.zeros ? w.zeros[lo + 8] : 8;
        if constexpr (std::is_same_v<OT, __nv_bfloat16>) {
            // Four pairs per word through the fragment trick of quant_mma.cuh: three instructions a pair
            // before the product instead of a shift, mask and conversion per element.
            const uint32_t zl = (0x4300u + z_lo) * 0x10001u, zh = (0x4300u + z_hi) * 0x10001u;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t pair = qmm::bf16x2_sub(
                    qmm::and_or(words[kt] >> (4 * i), 0x000F000Fu, 0x43004300u), (i & 1) ? zh : zl);
                const int slot = kt * 16 + 2 * t + 8 * (i >> 1);
                put_pair(tile, g + 8 * (i & 1), pc ? chunk_channel(slot) : slot, pair, (i & 1) ? s_hi : s_lo, 1.0f);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int i = j & 3, second = j >> 2;
                const int r = g + 8 * (i & 1), slot = kt * 16 + 2 * t + 8 * (i >> 1) + second;
                const int col = pc ? chunk_channel(slot) : slot;
                const int v = static_cast<int>((words[kt] >> (4 * j)) & 15u);
                const float val =
                    (i & 1) ? static_cast<float>(v - z_hi) * s_hi : static_cast<float>(v - z_lo) * s_lo;
                tile[r * kTileLd + col] = val;  // OT = float here
            }
        }
    }
    store_tile(tile, out, nt, c, w.N, w.K, w.perm, lane);
}

__device__ __forceinline__ float e4m3_to_float(uint32_t b) {
    const uint32_t bits =
        ((b & 0x80u) << 24) | ((b & 0x7Fu) << 20);         // into f32 positions, exponent off by 120
    return __uint_as_float(bits) * 1.329227995784916e36f;  // 2^120 (exact, subnormals included)
}

// The lane's 32 bytes of chunk (nt, c) of an FP8 weight.
struct Fp8Words {
    uint4 q0, q1;
};
__device__ __forceinline__ Fp8Words fp8_chunk_words(const Fp8Dev& w, int64_t nt, int64_t c, int lane) {
    const uint4* p =
        reinterpret_cast<const uint4*>(w.words) + (tile_index(nt, c, w.NT, w.KC, w.tile_order) * 32 + lane) * 2;
    return {p[0], p[1]};
}

template <class OT>
__device__ __forceinline__ void dequant_fp8_chunk(
    const Fp8Dev& w, OT* __restrict__ out, OT* tile, int64_t nt, int64_t c, Fp8Words q, int lane) {
    const uint32_t words[8] = {q.q0.x, q.q0.y, q.q0.z, q.q0.w, q.q1.x, q.q1.y, q.q1.z, q.q1.w};
    const int g = lane >> 2, t = lane & 3;
    const bool pc = chunk_permuted(w.bk, w.SG);  // tile column = channel of the k-slot
    const int bn = static_cast<int>(w.bn), bk = static_cast<int>(w.bk), SG = static_cast<int>(w.SG);
    const int n_lo = static_cast<int>(min(nt * 16 + g, w.N - 1)),
              n_hi = static_cast<int>(min(nt * 16 + g + 8, w.N - 1));
    const float* srow_lo = w.scales + static_cast<int64_t>(n_lo / bn) * SG;
    const float* srow_hi = w.scales + static_cast<int64_t>(n_hi / bn) * SG;
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {
        const int kb = min((static_cast<int>(c) * 64 + kt * 16) / bk, SG - 1);
        const float s_lo = srow_lo[kb], s_hi = srow_hi[kb];
        if constexpr (std::is_same_v<OT, __nv_bfloat16>) {
            // Bytes 0 / 2 and 1 / 3 of each word are the pairs of rows g and g + 8 (repack.h).
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t wd = words[kt * 2 + (i >> 1)] >> (8 * (i & 1));
                const int slot = kt * 16 + 2 * t + 8 * (i >> 1);
                put_pair(tile, g + 8 * (i & 1), pc ? chunk_channel(slot) : slot, qmm::fp8x2_to_bf16x2_scaled(wd),
                         (i & 1) ? s_hi : s_lo, 1.329227995784916e36f);
            }
        } else {
#pragma unroll
            for (int b = 0; b < 8; ++b) {
                const int word = b >> 2, byte = b & 3;
                const int i = 2 * word + (byte & 1), second = byte >> 1;
                const int r = g + 8 * (i & 1), slot = kt * 16 + 2 * t + 8 * (i >> 1) + second;
                const int col = pc ? chunk_channel(slot) : slot;
                const float v = e4m3_to_float((words[kt * 2 + word] >> (8 * byte)) & 0xFFu);
                tile[r * kTileLd + col] = v * ((i & 1) ? s_hi : s_lo);  // OT = float here
            }
        }
    }
    store_tile(tile, out, nt, c, w.N, w.K, nullptr, lane);
}

// The FP8 weight's codes back in the checkpoint's [N, K] row-major order (the A operand of the W8A8 prefill GEMM,
// gemm_fp8_block.cu), for chunk-permuted weights (every 128 x 128-block one): lane (g, t) holds the chunk's
// channels 16 t .. 16 t + 15 of rows g and g + 8 (tile_layout.h fp8_row_word), so each row goes out as one
// 16-byte store after four byte permutes (a warp: 16 rows x 64 contiguous bytes).
__device__ __forceinline__ void unpack_fp8_chunk(const Fp8Dev& w, uint8_t* __restrict__ out, int64_t nt, int64_t c,
                                                 Fp8Words q, int lane) {
    const uint32_t words[8] = {q.q0.x, q.q0.y, q.q0.z, q.q0.w, q.q1.x, q.q1.y, q.q1.z, q.q1.w};
    const int g = lane >> 2, t = lane & 3;
    uint4 lo, hi;
    uint32_t* l = &lo.x;
    uint32_t* h = &hi.x;
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {
        l[kt] = fp8_row_word(words[2 * kt], words[2 * kt + 1], false);
        h[kt] = fp8_row_word(words[2 * kt], words[2 * kt + 1], true);
    }
    const int64_t n = nt * 16 + g, k = c * 64 + 16 * t;
    if (n < w.N) *reinterpret_cast<uint4*>(out + n * w.K + k) = lo;
    if (n + 8 < w.N) *reinterpret_cast<uint4*>(out + (n + 8) * w.K + k) = hi;
}

// The two formats behind one kernel shape: Dev (the weight), Words (a lane's bytes of one chunk), words()
// loads them, decode() writes the chunk's tile to out.
template <class ST, class OT>
struct Int4Chunks {
    using Dev = Int4Dev;
    using Out = OT;
    using Words = uint4;
    __device__ static Words words(const Dev& w, int64_t nt, int64_t c, int lane) {
        return int4_chunk_words(w, nt, c, lane);
    }
    __device__ static void decode(const Dev& w, OT* out, OT* tile, int64_t nt, int64_t c, Words q, int lane) {
        dequant_int4_chunk<ST>(w, out, tile, nt, c, q, lane);
    }
};
template <class OT>
struct Fp8Chunks {
    using Dev = Fp8Dev;
    using Out = OT;
    using Words = Fp8Words;
    __device__ static Words words(const Dev& w, int64_t nt, int64_t c, int lane) {
        return fp8_chunk_words(w, nt, c, lane);
    }
    __device__ static void decode(const Dev& w, OT* out, OT* tile, int64_t nt, int64_t c, Words q, int lane) {
        dequant_fp8_chunk(w, out, tile, nt, c, q, lane);
    }
};

// One warp per chunk, eight per block, chunks in storage order along K within an n-tile (see above).
template <class F>
__global__ void __launch_bounds__(32 * kDqWarps)
    dequant_kernel(const typename F::Dev w, typename F::Out* __restrict__ out) {
    __shared__ __align__(16) typename F::Out tiles[kDqWarps][16 * kTileLd];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kDqWarps + warp;  // (nt, c), c fastest
    if (chunk >= w.NT * w.KC) return;
    const int64_t nt = chunk / w.KC, c = chunk - nt * w.KC;
    F::decode(w, out, tiles[warp], nt, c, F::words(w, nt, c, lane), lane);
}

}  // namespace grimoire::cuda::dq
