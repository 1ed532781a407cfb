// Per-block FP8 quantization of BF16 activations for the W8A8 FP8 prefill GEMM (gemm_fp8_block.cu): the
// CPU oracle's formula (kernels/cpu/dequant.h quantize_act_fp8) code for code.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/cpu/dequant.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant.h"

namespace grimoire::cuda {

namespace {

constexpr int kActWarps = 8;

// One 128-channel block of a row, four channels per lane of a full warp: raw = the lane's four BF16 values
// (channels 4 lane .. 4 lane + 3, low half first). Returns their e4m3 codes (byte i = channel 4 lane + i) and
// sets s to the block's scale, max(amax, 1e-10) / 448 (every lane). The codes are e4m3(x * (1 / s)): both
// divisions IEEE (__fdiv_rn / __frcp_rn, whatever the compile flags), the product one rounding, the
// conversion round-to-nearest-even and saturating.
__device__ __forceinline__ uint32_t fp8_act_block4(uint2 raw, float& s) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    float amax = fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(b.x), fabsf(b.y)));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    s = __fdiv_rn(fmaxf(amax, cpu::kFp8ActMinAmax), 448.0f);
    const float r = __frcp_rn(s);
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(a.x, r), __fmul_rn(a.y, r)),
                                                 __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(b.x, r), __fmul_rn(b.y, r)),
                                                 __NV_SATFINITE, __NV_E4M3);
    return (lo & 0xFFFFu) | (hi << 16);
}

// One warp per (row m, block kb) of 128 channels, four channels per lane (one 8-byte load, one 4-byte store).
// x [M, K] BF16; q [M4, K] e4m3; scales [K / 128][M4] f32. Rows M..M4-1: zero codes, scale 0.
__global__ void __launch_bounds__(32 * kActWarps) quant_act_fp8_kernel(const __nv_bfloat16* __restrict__ x,
                                                                       int64_t M,
                                                                       int64_t M4,
                                                                       int64_t K,
                                                                       uint32_t* __restrict__ q,
                                                                       float* __restrict__ scales) {
    const int lane = threadIdx.x & 31;
    const int64_t unit = static_cast<int64_t>(blockIdx.x) * kActWarps + (threadIdx.x >> 5);
    const int64_t KB = K / 128;
    if (unit >= M4 * KB) return;
    const int64_t m = unit / KB, kb = unit - m * KB;
    uint32_t* qo = q + (m * K + kb * 128) / 4 + lane;
    if (m >= M) {
        *qo = 0;
        if (lane == 0) scales[kb * M4 + m] = 0.0f;
        return;
    }
    const uint2 raw = *reinterpret_cast<const uint2*>(x + m * K + kb * 128 + lane * 4);
    float sc;
    const uint32_t packed = fp8_act_block4(raw, sc);
    *qo = packed;
    if (lane == 0) scales[kb * M4 + m] = sc;
}

}  // namespace

void quant_act_fp8(const Tensor& x, int64_t M4, uint8_t* q, float* scales, cudaStream_t s) {
    const int64_t M = x.rows(), K = x.cols();
    if (x.dtype != DType::BF16 || K % 128 != 0 || M4 < M || M4 % 4 != 0 ||
        (reinterpret_cast<uintptr_t>(x.data) & 7) != 0 || (reinterpret_cast<uintptr_t>(q) & 3) != 0)
        throw Error(
            "cuda quant_act_fp8: x must be [M, K] BF16 (8-byte aligned) with K % 128 == 0, M4 >= M a "
            "multiple of 4 (x [" +
            std::to_string(M) + ", " + std::to_string(K) + "], M4 " + std::to_string(M4) + ")");
    const int64_t units = M4 * (K / 128);
    if (units == 0) return;
    quant_act_fp8_kernel<<<static_cast<unsigned>((units + kActWarps - 1) / kActWarps), 32 * kActWarps, 0,
                           s>>>(static_cast<const __nv_bfloat16*>(x.data), M, M4, K,
                                reinterpret_cast<uint32_t*>(q), scales);
    check_launch("quant_act_fp8");
}

}  // namespace grimoire::cuda
