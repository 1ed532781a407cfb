// The FP8 activation quantizer's device form (quant_act_fp8.cu, the W8A8 prefill's activations): it must give
// the CPU oracle's codes (kernels/cpu/dequant.h quantize_act_fp8).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cpu/dequant.h"

namespace grimoire::cuda {

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

}  // namespace grimoire::cuda
