// Per-block FP8 quantization of activations (kernels/cpu/dequant.h quantize_act_fp8): the oracle the CUDA
// quantizer (kernels/cuda/quant_act_fp8.cu) must match code for code and scale for scale.
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/dequant.h"

namespace grimoire::cpu {

void quantize_act_fp8(const float* x, int64_t M, int64_t K, int64_t block, uint8_t* q, float* scales) {
    GRIMOIRE_CHECK(block > 0, "quantize_act_fp8: block must be positive");
    const int64_t nb = (K + block - 1) / block;
    for (int64_t m = 0; m < M; ++m) {
        const float* xr = x + m * K;
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t k0 = b * block, k1 = std::min(K, k0 + block);
            float amax = 0.0f;
            for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(xr[k]));
            const float s = std::max(amax, kFp8ActMinAmax) / 448.0f;
            scales[m * nb + b] = s;
            const float r = 1.0f / s;
            for (int64_t k = k0; k < k1; ++k) q[m * K + k] = f32_to_fp8_e4m3(xr[k] * r);
        }
    }
}

}  // namespace grimoire::cpu
