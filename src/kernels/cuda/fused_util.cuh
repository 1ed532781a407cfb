// Device helpers of the fused kernels (fused_*.cu): rounding an fp32 value the way storing it in an
// activation dtype would, so a fused kernel that keeps a value in registers reproduces the unfused sequence,
// which stored it to memory between two kernels.
#pragma once
#include "kernels/cuda/common.cuh"

namespace grimoire::cuda {

__device__ __forceinline__ float round_as(int dt, float v) {
    if (dt == kBF16) return __bfloat162float(__float2bfloat16(v));
    if (dt == kF16) return __half2float(__float2half(v));
    return v;
}

}  // namespace grimoire::cuda
