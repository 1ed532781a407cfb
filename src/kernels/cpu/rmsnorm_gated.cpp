// Qwen3.5 GDN output norm: normalise x (no +1 on the weight), then gate with silu(z). The norm comes
// before the gate (models-and-formats.md §1.4 variant 2).
#include <algorithm>
#include <cmath>

#include "core/threadpool.h"
#include "kernels/cpu/kernels.h"

namespace grimoire::cpu {

void rmsnorm_gated(const float* x, const float* z, const float* w, int64_t R, int64_t D, float eps, float* out) {
    parallel_for(R, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = x + r * D;
            const float* zr = z + r * D;
            float* yr = out + r * D;
            double ss = 0.0;
            for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(xr[i]) * xr[i];
            const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(D) + eps));
            for (int64_t i = 0; i < D; ++i) {
                const float silu = zr[i] / (1.0f + std::exp(-zr[i]));
                yr[i] = w[i] * (xr[i] * inv) * silu;
            }
        }
    }, std::max<int64_t>(16, (int64_t{1} << 14) / std::max<int64_t>(1, D)));
}

}  // namespace grimoire::cpu
