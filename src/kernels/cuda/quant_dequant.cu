// Dequantization of a repacked INT4 / FP8 weight to a dense BF16 [N, K] matrix (F32 for the F32 reference
// mode) for the prefill path: a cuBLAS GEMM follows, and at M >= 512 its compute dominates this extra pass.
// Each lane decodes the same fragment positions the qmm kernel reads, so both paths share the layout and its
// tests. Values are rounded once, to BF16, from the exact fp32 product (q - z) * s.
// Also: the random-bits fill used by --random-weights for packed layers.
#include <type_traits>

#include "kernels/cuda/quant_mma.cuh"
#include "quant/tile_layout.h"

namespace grimoire::cuda {

namespace {

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

template <class ST, class OT>
__global__ void __launch_bounds__(32 * kDqWarps) dequant_int4_kernel(const Int4Dev w, OT* __restrict__ out) {
    __shared__ __align__(16) OT tiles[kDqWarps][16 * kTileLd];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kDqWarps + warp;  // (nt, c), c fastest
    if (chunk >= w.NT * w.KC) return;
    const int64_t nt = chunk / w.KC, c = chunk - nt * w.KC;
    const uint4 q = reinterpret_cast<const uint4*>(w.words)[tile_index(nt, c, w.NT, w.KC) * 32 + lane];
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    const int64_t NP = w.NT * 16;
    OT* tile = tiles[warp];
    const int g = lane >> 2, t = lane & 3;
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
                put_pair(tile, g + 8 * (i & 1), kt * 16 + 2 * t + 8 * (i >> 1), pair, (i & 1) ? s_hi : s_lo,
                         1.0f);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int i = j & 3, second = j >> 2;
                const int r = g + 8 * (i & 1), col = kt * 16 + 2 * t + 8 * (i >> 1) + second;
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

template <class OT>
__global__ void __launch_bounds__(32 * kDqWarps) dequant_fp8_kernel(const Fp8Dev w, OT* __restrict__ out) {
    __shared__ __align__(16) OT tiles[kDqWarps][16 * kTileLd];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kDqWarps + warp;  // (nt, c), c fastest
    if (chunk >= w.NT * w.KC) return;
    const int64_t nt = chunk / w.KC, c = chunk - nt * w.KC;
    const uint4* p =
        reinterpret_cast<const uint4*>(w.words) + (tile_index(nt, c, w.NT, w.KC) * 32 + lane) * 2;
    const uint4 q0 = p[0], q1 = p[1];
    const uint32_t words[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    OT* tile = tiles[warp];
    const int g = lane >> 2, t = lane & 3;
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
                put_pair(tile, g + 8 * (i & 1), kt * 16 + 2 * t + 8 * (i >> 1),
                         qmm::fp8x2_to_bf16x2_scaled(wd), (i & 1) ? s_hi : s_lo, 1.329227995784916e36f);
            }
        } else {
#pragma unroll
            for (int b = 0; b < 8; ++b) {
                const int word = b >> 2, byte = b & 3;
                const int i = 2 * word + (byte & 1), second = byte >> 1;
                const int r = g + 8 * (i & 1), col = kt * 16 + 2 * t + 8 * (i >> 1) + second;
                const float v = e4m3_to_float((words[kt * 2 + word] >> (8 * byte)) & 0xFFu);
                tile[r * kTileLd + col] = v * ((i & 1) ? s_hi : s_lo);  // OT = float here
            }
        }
    }
    store_tile(tile, out, nt, c, w.N, w.K, nullptr, lane);
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void random_bits_kernel(uint32_t* p, int64_t n, uint64_t seed, uint32_t mask) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        p[i] = static_cast<uint32_t>(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(i))) >> 16) & mask;
}

}  // namespace

template <class OT>
void launch_dequant_int4(const Int4Dev& w, OT* o, cudaStream_t s) {
    const unsigned grid = static_cast<unsigned>((w.NT * w.KC + kDqWarps - 1) / kDqWarps);
    switch (w.scale_dtype) {
        case DType::F16:
            dequant_int4_kernel<__half, OT><<<grid, 32 * kDqWarps, 0, s>>>(w, o);
            break;
        case DType::BF16:
            dequant_int4_kernel<__nv_bfloat16, OT><<<grid, 32 * kDqWarps, 0, s>>>(w, o);
            break;
        case DType::F32:
            dequant_int4_kernel<float, OT><<<grid, 32 * kDqWarps, 0, s>>>(w, o);
            break;
        default:
            throw Error("cuda dequant_int4: scales must be F16, BF16 or F32");
    }
}

void dequant_int4(const Int4Dev& w, void* out, DType out_dtype, cudaStream_t s) {
    if (w.NT * w.KC == 0) return;
    if (out_dtype == DType::F32)
        launch_dequant_int4(w, static_cast<float*>(out), s);
    else if (out_dtype == DType::BF16)
        launch_dequant_int4(w, static_cast<__nv_bfloat16*>(out), s);
    else
        throw Error("cuda dequant_int4: output must be BF16 or F32");
    check_launch("dequant_int4");
}

void dequant_fp8(const Fp8Dev& w, void* out, DType out_dtype, cudaStream_t s) {
    if (w.NT * w.KC == 0) return;
    const unsigned grid = static_cast<unsigned>((w.NT * w.KC + kDqWarps - 1) / kDqWarps);
    if (out_dtype == DType::F32)
        dequant_fp8_kernel<float><<<grid, 32 * kDqWarps, 0, s>>>(w, static_cast<float*>(out));
    else if (out_dtype == DType::BF16)
        dequant_fp8_kernel<__nv_bfloat16><<<grid, 32 * kDqWarps, 0, s>>>(w, static_cast<__nv_bfloat16*>(out));
    else
        throw Error("cuda dequant_fp8: output must be BF16 or F32");
    check_launch("dequant_fp8");
}

void random_bits(uint32_t* p, int64_t n, uint64_t seed, uint32_t mask, cudaStream_t s) {
    if (n == 0) return;
    const int64_t blocks = (n + 255) / 256;
    random_bits_kernel<<<static_cast<unsigned>(blocks > 8192 ? 8192 : blocks), 256, 0, s>>>(p, n, seed, mask);
    check_launch("random_bits");
}

}  // namespace grimoire::cuda
