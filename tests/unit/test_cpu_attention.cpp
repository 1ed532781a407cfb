// Causal GQA attention with the KV cache against a naive double reference, and incremental use
// (n_past > 0: chunked prefill, token-by-token decode) against one full recompute.
#include <gtest/gtest.h>

#include "test_cpu_util.h"

namespace grimoire {
namespace {

using test::host;
using test::randn;

// out[t, h] over keys 0..n_past+t, where keys/values [n_past + T, Hkv, D] hold the whole history.
std::vector<double> ref_attention(const std::vector<float>& q, const std::vector<float>& keys,
                                  const std::vector<float>& vals, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                  int64_t n_past, double scale) {
    std::vector<double> out(static_cast<size_t>(T * Hq * D), 0.0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < Hq; ++h) {
            const int64_t kvh = h / (Hq / Hkv), n = n_past + t + 1;
            std::vector<double> s(static_cast<size_t>(n));
            double mx = -1e300, sum = 0.0;
            for (int64_t j = 0; j < n; ++j) {
                double d = 0.0;
                for (int64_t i = 0; i < D; ++i) d += static_cast<double>(q[(t * Hq + h) * D + i]) * keys[(j * Hkv + kvh) * D + i];
                s[static_cast<size_t>(j)] = d * scale;
                mx = std::max(mx, d * scale);
            }
            for (auto& v : s) sum += v = std::exp(v - mx);
            for (int64_t j = 0; j < n; ++j)
                for (int64_t i = 0; i < D; ++i)
                    out[static_cast<size_t>((t * Hq + h) * D + i)] += s[static_cast<size_t>(j)] / sum * vals[(j * Hkv + kvh) * D + i];
        }
    return out;
}

struct Case {
    int64_t Hq, Hkv, D;
};

TEST(CpuAttention, MatchesNaiveReference) {
    for (Case c : {Case{6, 2, 16}, Case{3, 3, 13}, Case{4, 1, 8}})
        for (int64_t T : {1, 3, 17, 65})
            for (int64_t n_past : {0, 5}) {
                CpuBackend be;
                const int64_t max_ctx = 80, row = c.Hkv * c.D;
                const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
                // History rows 0..n_past-1 are already in the cache; the call appends T more.
                std::vector<float> keys = randn((n_past + T) * row, 1), vals = randn((n_past + T) * row, 2);
                std::vector<float> q = randn(T * c.Hq * c.D, 3, 2.0f);
                Tensor kc = be.alloc_persistent(DType::F32, {max_ctx, c.Hkv, c.D});
                Tensor vc = be.alloc_persistent(DType::F32, {max_ctx, c.Hkv, c.D});
                std::copy(keys.begin(), keys.begin() + n_past * row, kc.ptr<float>());
                std::copy(vals.begin(), vals.begin() + n_past * row, vc.ptr<float>());
                Tensor qt = be.upload_raw(q.data(), DType::F32, {T, c.Hq, c.D});
                Tensor kt = be.upload_raw(keys.data() + n_past * row, DType::F32, {T, c.Hkv, c.D});
                Tensor vt = be.upload_raw(vals.data() + n_past * row, DType::F32, {T, c.Hkv, c.D});
                Tensor out = be.scratch(DType::F32, {T, c.Hq * c.D});  // flattened output is accepted
                be.attention(qt, kt, vt, kc, vc, n_past, scale, out);
                test::expect_close(host(be, out), ref_attention(q, keys, vals, T, c.Hq, c.Hkv, c.D, n_past, scale),
                                   1e-5, 1e-5, "attention");
                // The new rows landed in the cache.
                for (int64_t i = 0; i < T * row; ++i) ASSERT_EQ(kc.ptr<float>()[n_past * row + i], keys[n_past * row + i]);
            }
}

TEST(CpuAttention, IncrementalEqualsFullRecompute) {
    const int64_t Hq = 8, Hkv = 2, D = 32, N = 23, max_ctx = 32, row = Hkv * D;
    const float scale = 0.125f;
    std::vector<float> q = randn(N * Hq * D, 4), k = randn(N * row, 5), v = randn(N * row, 6);
    CpuBackend be;
    auto run = [&](const std::vector<int64_t>& chunks) {
        Tensor kc = be.alloc_persistent(DType::F32, {max_ctx, Hkv, D});
        Tensor vc = be.alloc_persistent(DType::F32, {max_ctx, Hkv, D});
        std::vector<float> all;
        int64_t pos = 0;
        for (int64_t T : chunks) {
            Tensor qt = be.upload_raw(q.data() + pos * Hq * D, DType::F32, {T, Hq, D});
            Tensor kt = be.upload_raw(k.data() + pos * row, DType::F32, {T, Hkv, D});
            Tensor vt = be.upload_raw(v.data() + pos * row, DType::F32, {T, Hkv, D});
            Tensor out = be.scratch(DType::F32, {T, Hq, D});
            be.attention(qt, kt, vt, kc, vc, pos, scale, out);
            const auto o = host(be, out);
            all.insert(all.end(), o.begin(), o.end());
            pos += T;
        }
        return all;
    };
    const std::vector<float> full = run({N});
    const std::vector<float> chunked = run({7, 1, 9, 6});
    std::vector<int64_t> ones(static_cast<size_t>(N), 1);
    const std::vector<float> decode = run(ones);
    ASSERT_EQ(full.size(), chunked.size());
    for (size_t i = 0; i < full.size(); ++i) {
        // Same visible rows and the same summation order per query: identical up to rounding.
        ASSERT_NEAR(chunked[i], full[i], 1e-6) << i;
        ASSERT_NEAR(decode[i], full[i], 1e-6) << i;
    }
}

}  // namespace
}  // namespace grimoire
