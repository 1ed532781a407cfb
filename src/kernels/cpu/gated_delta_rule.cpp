// Gated DeltaNet, recurrent form: exact token-by-token reference for the chunked kernels
// (models-and-formats.md §1.4 steps 4-7). Value heads are independent, so they run in parallel.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threadpool.h"
#include "kernels/cpu/kernels.h"

namespace grimoire::cpu {

namespace {
// torch.nn.functional.softplus with beta 1 and threshold 20 (linear above the threshold).
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// v * rsqrt(sum v^2 + eps) into dst, then times `post`.
void l2norm(const float* v, int64_t n, float post, float* dst) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(v[i]) * v[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss + 1e-6)) * post;
    for (int64_t i = 0; i < n; ++i) dst[i] = v[i] * inv;
}
}  // namespace

void gated_delta_rule(const float* q, const float* k, const float* v, const float* a, const float* b,
                      const float* A_log, const float* dt_bias, float* state, const GdnShape& s, float* out) {
    GRIMOIRE_CHECK(s.Hk > 0 && s.Hv % s.Hk == 0, "gated_delta_rule: Hv must be a multiple of Hk");
    const int64_t ratio = s.Hv / s.Hk, dk = s.dk, dv = s.dv;
    const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
    parallel_for(s.Hv, [&](int64_t h0, int64_t h1) {
        std::vector<float> qn(static_cast<size_t>(dk)), kn(static_cast<size_t>(dk)), u(static_cast<size_t>(dv));
        for (int64_t h = h0; h < h1; ++h) {
            const int64_t kh = h / ratio;
            float* S = state + h * dk * dv;  // [dk, dv]
            const float A = std::exp(A_log[h]);
            for (int64_t t = 0; t < s.T; ++t) {
                l2norm(q + (t * s.Hk + kh) * dk, dk, qscale, qn.data());
                l2norm(k + (t * s.Hk + kh) * dk, dk, 1.0f, kn.data());
                const float* vt = v + (t * s.Hv + h) * dv;
                const float beta = 1.0f / (1.0f + std::exp(-b[t * s.Hv + h]));
                const float decay = std::exp(-A * softplus(a[t * s.Hv + h] + dt_bias[h]));
                // u = beta * (v - (decay S)^T k)
                for (int64_t j = 0; j < dv; ++j) u[static_cast<size_t>(j)] = 0.0f;
                for (int64_t i = 0; i < dk; ++i) {
                    float* Si = S + i * dv;
                    const float ki = kn[static_cast<size_t>(i)];
                    for (int64_t j = 0; j < dv; ++j) {
                        Si[j] *= decay;
                        u[static_cast<size_t>(j)] += Si[j] * ki;
                    }
                }
                for (int64_t j = 0; j < dv; ++j) u[static_cast<size_t>(j)] = beta * (vt[j] - u[static_cast<size_t>(j)]);
                // S += k u^T and o = S^T q in the same pass over S.
                float* o = out + (t * s.Hv + h) * dv;
                for (int64_t j = 0; j < dv; ++j) o[j] = 0.0f;
                for (int64_t i = 0; i < dk; ++i) {
                    float* Si = S + i * dv;
                    const float ki = kn[static_cast<size_t>(i)], qi = qn[static_cast<size_t>(i)];
                    for (int64_t j = 0; j < dv; ++j) {
                        Si[j] += ki * u[static_cast<size_t>(j)];
                        o[j] += Si[j] * qi;
                    }
                }
            }
        }
    }, std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, s.T * dk * dv)));  // >= ~64k MACs per chunk
}

}  // namespace grimoire::cpu
