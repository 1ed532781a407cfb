// Causal grouped-query attention against the KV cache, fp32 throughout. One task per (token, q head):
// scores over the visible cache rows, max-subtracted softmax, weighted sum of values.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/threadpool.h"
#include "kernels/cpu/kernels.h"

namespace grimoire::cpu {

void attention(const float* q, const float* k, const float* v, float* k_cache, float* v_cache, int64_t T,
               int64_t Hq, int64_t Hkv, int64_t D, int64_t max_ctx, int64_t n_past, float scale, float* out) {
    GRIMOIRE_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention: Hq must be a multiple of Hkv");
    GRIMOIRE_CHECK(n_past >= 0 && n_past + T <= max_ctx, "attention: KV cache overflow");
    const int64_t row = Hkv * D;
    std::memcpy(k_cache + n_past * row, k, static_cast<size_t>(T * row) * sizeof(float));
    std::memcpy(v_cache + n_past * row, v, static_cast<size_t>(T * row) * sizeof(float));
    const int64_t group = Hq / Hkv;

    parallel_for(T * Hq, [&](int64_t i0, int64_t i1) {
        std::vector<float> p(static_cast<size_t>(n_past + T));
        std::vector<float> acc(static_cast<size_t>(D));
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t t = i / Hq, h = i % Hq, kvh = h / group;
            const int64_t n = n_past + t + 1;  // visible cache rows
            const float* qv = q + (t * Hq + h) * D;
            float mx = -INFINITY;
            for (int64_t j = 0; j < n; ++j) {
                const float* kv = k_cache + j * row + kvh * D;
                float s = 0.0f;
                for (int64_t d = 0; d < D; ++d) s += qv[d] * kv[d];
                s *= scale;
                p[static_cast<size_t>(j)] = s;
                mx = std::max(mx, s);
            }
            double sum = 0.0;
            for (int64_t j = 0; j < n; ++j) {
                const float e = std::exp(p[static_cast<size_t>(j)] - mx);
                p[static_cast<size_t>(j)] = e;
                sum += e;
            }
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t j = 0; j < n; ++j) {
                const float* vv = v_cache + j * row + kvh * D;
                const float w = p[static_cast<size_t>(j)];
                for (int64_t d = 0; d < D; ++d) acc[static_cast<size_t>(d)] += w * vv[d];
            }
            const float inv = static_cast<float>(1.0 / sum);
            float* o = out + (t * Hq + h) * D;
            for (int64_t d = 0; d < D; ++d) o[d] = acc[static_cast<size_t>(d)] * inv;
        }
    }, std::max<int64_t>(1, (int64_t{1} << 15) / ((n_past + T) * D)));  // >= ~32k MACs per chunk
}

}  // namespace grimoire::cpu
