// Gated RMSNorm of the Gated DeltaNet output: out = w * (x / rms(x)) * silu(z), rows of D = w.numel().
// z may be read in place from a wider per-token row (a stacked projection's output): row r = t * zh + h of
// z then starts at t * zs + h * D (zh = 0: z is contiguous like x).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

static __global__ void rmsnorm_gated_kernel(const void* __restrict__ x,  // [R, D]
                                            int xdt,
                                            const void* __restrict__ z,  // [R, D]
                                            int zdt,
                                            const void* __restrict__ w,  // [D]
                                            int wdt, int64_t D, float eps,
                                            void* out,  // [R, D], may alias x
                                            int odt, int64_t zs, int64_t zh) {
    __shared__ float red[32];
    const int64_t base = static_cast<int64_t>(blockIdx.x) * D;
    const int64_t zbase = zh ? (blockIdx.x / zh) * zs + (blockIdx.x % zh) * D : base;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
        const float v = ld(x, xdt, base + c);
        ss += v * v;
    }
    const float r = rsqrtf(block_sum(ss, red) / static_cast<float>(D) + eps);
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
        const float zv = ld(z, zdt, zbase + c);
        st(out, odt, base + c, ld(w, wdt, c) * ld(x, xdt, base + c) * r * zv * sigmoidf_(zv));
    }
}

// BF16 x, z, out with D a multiple of 128 (<= 512; the DeltaNet's dv): a warp per row (kRowsPerWarp rows in
// turn), a lane holding 4 consecutive values per 128 columns (8-byte loads, 256 contiguous bytes per warp), the
// sum of squares by shuffles. The block-per-row kernel above ran a 128-wide row per 128-thread block with two
// barriers, ~4x below the bandwidth its bytes need at [512 x 48, 128].
constexpr int kWarpRowsPerBlock = 8;
// Rows per warp: both rows' loads are issued before the first use, so a lane has 4 loads in flight (with one
// row, 2: the [512 x 48, 128] call ran at ~60% of the bandwidth its bytes need).
constexpr int kRowsPerWarp = 2;
template <int NC>  // D / 128
static __global__ void __launch_bounds__(32 * kWarpRowsPerBlock)
    rmsnorm_gated_warp_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ z,
                              const void* __restrict__ w, int wdt, int64_t R, float eps, __nv_bfloat16* out,
                              int64_t zs, int64_t zh) {
    constexpr int D = NC * 128;
    const int lane = threadIdx.x & 31;
    const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5)) * kRowsPerWarp;
    if (r0 >= R) return;
    uint2 xu[kRowsPerWarp][NC], zu[kRowsPerWarp][NC];
#pragma unroll
    for (int q = 0; q < kRowsPerWarp; ++q) {
        const int64_t r = r0 + q;
        if (r >= R) continue;
        const int64_t zbase = zh ? (r / zh) * zs + (r % zh) * D : r * D;
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            xu[q][j] = *reinterpret_cast<const uint2*>(x + r * D + j * 128 + lane * 4);
            zu[q][j] = *reinterpret_cast<const uint2*>(z + zbase + j * 128 + lane * 4);
        }
    }
#pragma unroll
    for (int q = 0; q < kRowsPerWarp; ++q) {
        const int64_t r = r0 + q;
        if (r >= R) continue;
        float xv[NC][4], zv[NC][4];
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const __nv_bfloat162* xh = reinterpret_cast<const __nv_bfloat162*>(&xu[q][j]);
            const __nv_bfloat162* zh2 = reinterpret_cast<const __nv_bfloat162*>(&zu[q][j]);
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float2 xf = __bfloat1622float2(xh[e]), zf = __bfloat1622float2(zh2[e]);
                xv[j][2 * e] = xf.x;
                xv[j][2 * e + 1] = xf.y;
                zv[j][2 * e] = zf.x;
                zv[j][2 * e + 1] = zf.y;
                ss += xf.x * xf.x + xf.y * xf.y;
            }
        }
        const float rs = rsqrtf(warp_sum(ss) / static_cast<float>(D) + eps);
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const int c = j * 128 + lane * 4;
            float o[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) o[e] = ld(w, wdt, c + e) * xv[j][e] * rs * zv[j][e] * sigmoidf_(zv[j][e]);
            uint2 ou;
            __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&ou);
            oh[0] = __floats2bfloat162_rn(o[0], o[1]);
            oh[1] = __floats2bfloat162_rn(o[2], o[3]);
            *reinterpret_cast<uint2*>(out + r * D + c) = ou;
        }
    }
}

static bool launch_rmsnorm_gated_warp(const void* x, int xdt, const void* z, int zdt, const void* w, int wdt,
                                      int64_t R, int64_t D, float eps, void* out, int odt, int64_t zs, int64_t zh,
                                      cudaStream_t s) {
    const bool al8 = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(z) |
                       reinterpret_cast<uintptr_t>(out)) & 7) == 0;
    if (xdt != kBF16 || zdt != kBF16 || odt != kBF16 || !al8 || D % 128 != 0 || D > 512 || zs % 4 != 0) return false;
    const int64_t rows_per_block = static_cast<int64_t>(kWarpRowsPerBlock) * kRowsPerWarp;
    const unsigned grid = static_cast<unsigned>((R + rows_per_block - 1) / rows_per_block);
    const auto* xb = static_cast<const __nv_bfloat16*>(x);
    const auto* zb = static_cast<const __nv_bfloat16*>(z);
    auto* ob = static_cast<__nv_bfloat16*>(out);
    switch (D / 128) {
        case 1: rmsnorm_gated_warp_kernel<1><<<grid, 32 * kWarpRowsPerBlock, 0, s>>>(xb, zb, w, wdt, R, eps, ob, zs, zh); break;
        case 2: rmsnorm_gated_warp_kernel<2><<<grid, 32 * kWarpRowsPerBlock, 0, s>>>(xb, zb, w, wdt, R, eps, ob, zs, zh); break;
        case 3: rmsnorm_gated_warp_kernel<3><<<grid, 32 * kWarpRowsPerBlock, 0, s>>>(xb, zb, w, wdt, R, eps, ob, zs, zh); break;
        default: rmsnorm_gated_warp_kernel<4><<<grid, 32 * kWarpRowsPerBlock, 0, s>>>(xb, zb, w, wdt, R, eps, ob, zs, zh); break;
    }
    check_launch("rmsnorm_gated");
    return true;
}

static void launch_rmsnorm_gated(const void* x, int xdt, const void* z, int zdt, const void* w, int wdt, int64_t R,
                                 int64_t D, float eps, void* out, int odt, int64_t zs, int64_t zh, cudaStream_t s) {
    if (launch_rmsnorm_gated_warp(x, xdt, z, zdt, w, wdt, R, D, eps, out, odt, zs, zh, s)) return;
    const int threads = D >= 256 ? 256 : (D >= 128 ? 128 : 32);
    rmsnorm_gated_kernel<<<static_cast<unsigned>(R), threads, 0, s>>>(x, xdt, z, zdt, w, wdt, D, eps, out, odt, zs, zh);
    check_launch("rmsnorm_gated");
}

void rmsnorm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& out, cudaStream_t s,
                   int64_t z_stride, int64_t z_rows_per_token) {
    const int64_t D = w.numel();
    if (z_rows_per_token < 0 || (z_rows_per_token > 0 && z_stride < z_rows_per_token * D))
        throw Error("cuda rmsnorm_gated: z's row stride is below its rows per token times D");
    if (D == 0 || x.numel() % D != 0 || z.numel() != x.numel() || out.numel() != x.numel())
        throw Error("cuda rmsnorm_gated: x, z, out must have the same size, a multiple of w [D]");
    if (x.numel() == 0) return;
    launch_rmsnorm_gated(x.data, dt_code(x.dtype, "rmsnorm_gated", "x"), z.data,
                         dt_code(z.dtype, "rmsnorm_gated", "z"), w.data, dt_code(w.dtype, "rmsnorm_gated", "w"),
                         x.numel() / D, D, eps, out.data, dt_code(out.dtype, "rmsnorm_gated", "out"), z_stride,
                         z_rows_per_token, s);
}

}  // namespace grimoire::cuda
