// RMSNorm over the last dimension; the sum of squares is accumulated in double so the oracle's
// error does not grow with D.
#include <algorithm>
#include <cmath>

#include "core/threadpool.h"
#include "kernels/cpu/kernels.h"

namespace grimoire::cpu {

void rmsnorm(const float* x, const float* w, int64_t R, int64_t D, float eps, NormKind kind, float* out) {
    const float add_one = kind == NormKind::PLUS_ONE ? 1.0f : 0.0f;
    parallel_for(R, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = x + r * D;
            float* yr = out + r * D;
            double ss = 0.0;
            for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(xr[i]) * xr[i];
            const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(D) + eps));
            for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] * inv * (w[i] + add_one);
        }
    }, std::max<int64_t>(16, (int64_t{1} << 15) / std::max<int64_t>(1, D)));
}

}  // namespace grimoire::cpu
