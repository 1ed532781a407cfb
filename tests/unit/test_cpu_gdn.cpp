// The Qwen3.5 linear-attention ops: conv1d_silu and the recurrent gated_delta_rule against naive double
// references, against transformers' torch_recurrent_gated_delta_rule (fixture from tools/make_gdn_fixture.py),
// and split-into-pieces vs whole (the carried state is exact).
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "test_cpu_util.h"
#include "../test_util.h"

namespace grimoire {
namespace {

using test::host;
using test::randn;

// Naive conv: x [T, C], w [C, K], prev [K-1, C] -> out [T, C], and the new state.
std::vector<double> ref_conv(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& prev,
                             int64_t T, int64_t C, int64_t K) {
    std::vector<double> out(static_cast<size_t>(T * C));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) {
            double s = 0.0;
            for (int64_t j = 0; j < K; ++j) {
                const int64_t r = t - (K - 1) + j;  // input row; < 0 reads the state
                const double in = r >= 0 ? x[r * C + c] : prev[(K - 1 + r) * C + c];
                s += w[c * K + j] * in;
            }
            out[static_cast<size_t>(t * C + c)] = s / (1.0 + std::exp(-s));
        }
    return out;
}

TEST(CpuConv1d, MatchesReferenceAndCarriesState) {
    for (int64_t K : {2, 4})
        for (int64_t T : {1, 2, 3, 17}) {
            const int64_t C = 37;
            CpuBackend be;
            std::vector<float> x = randn(T * C, 1), w = randn(C * K, 2), prev = randn((K - 1) * C, 3);
            Tensor xt = be.upload_raw(x.data(), DType::F32, {T, C}), wt = be.upload_raw(w.data(), DType::F32, {C, 1, K});
            Tensor st = be.alloc_persistent(DType::F32, {K - 1, C});
            be.from_host(st, prev.data());
            Tensor out = be.scratch(DType::F32, {T, C});
            be.conv1d_silu(xt, wt, st, out);
            test::expect_close(host(be, out), ref_conv(x, w, prev, T, C, K), 1e-5, 1e-6, "conv");
            // New state = the last K-1 rows of [prev; x].
            std::vector<float> hist = prev;
            hist.insert(hist.end(), x.begin(), x.end());
            const std::vector<float> got = host(be, st);
            for (int64_t i = 0; i < (K - 1) * C; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], hist[static_cast<size_t>(T * C + i)]);
        }
}

TEST(CpuConv1d, PiecesEqualWhole) {
    const int64_t T = 19, C = 10, K = 4;
    std::vector<float> x = randn(T * C, 4), w = randn(C * K, 5);
    CpuBackend be;
    Tensor wt = be.upload_raw(w.data(), DType::F32, {C, K});
    auto run = [&](const std::vector<int64_t>& pieces) {
        Tensor st = be.alloc_persistent(DType::F32, {K - 1, C});
        std::vector<float> all;
        int64_t pos = 0;
        for (int64_t n : pieces) {
            Tensor xt = be.upload_raw(x.data() + pos * C, DType::F32, {n, C});
            Tensor out = be.scratch(DType::F32, {n, C});
            be.conv1d_silu(xt, wt, st, out);
            const auto o = host(be, out);
            all.insert(all.end(), o.begin(), o.end());
            pos += n;
        }
        return all;
    };
    EXPECT_EQ(run({T}), run({1, 2, 1, 8, 7}));
}

struct Gdn {
    int64_t T, Hk, Hv, dk, dv;
    std::vector<float> q, k, v, a, b, A_log, dt_bias, state;
};

// Token-by-token recurrence in double (models-and-formats.md §1.4 steps 4-7). Updates g.state.
std::vector<double> ref_gdn(Gdn& g) {
    std::vector<double> S(g.state.begin(), g.state.end()), out(static_cast<size_t>(g.T * g.Hv * g.dv));
    for (int64_t h = 0; h < g.Hv; ++h) {
        const int64_t kh = h / (g.Hv / g.Hk);
        for (int64_t t = 0; t < g.T; ++t) {
            std::vector<double> qn(static_cast<size_t>(g.dk)), kn(static_cast<size_t>(g.dk)), u(static_cast<size_t>(g.dv));
            double qs = 0.0, ks = 0.0;
            for (int64_t i = 0; i < g.dk; ++i) {
                qs += std::pow(g.q[(t * g.Hk + kh) * g.dk + i], 2.0);
                ks += std::pow(g.k[(t * g.Hk + kh) * g.dk + i], 2.0);
            }
            for (int64_t i = 0; i < g.dk; ++i) {
                qn[i] = g.q[(t * g.Hk + kh) * g.dk + i] / std::sqrt(qs + 1e-6) / std::sqrt(static_cast<double>(g.dk));
                kn[i] = g.k[(t * g.Hk + kh) * g.dk + i] / std::sqrt(ks + 1e-6);
            }
            const double beta = 1.0 / (1.0 + std::exp(-static_cast<double>(g.b[t * g.Hv + h])));
            const double x = static_cast<double>(g.a[t * g.Hv + h]) + g.dt_bias[h];
            const double gg = -std::exp(static_cast<double>(g.A_log[h])) * (x > 20 ? x : std::log1p(std::exp(x)));
            double* Sh = S.data() + h * g.dk * g.dv;
            for (int64_t i = 0; i < g.dk * g.dv; ++i) Sh[i] *= std::exp(gg);
            for (int64_t j = 0; j < g.dv; ++j) {
                double kv = 0.0;
                for (int64_t i = 0; i < g.dk; ++i) kv += Sh[i * g.dv + j] * kn[i];
                u[j] = beta * (g.v[(t * g.Hv + h) * g.dv + j] - kv);
            }
            for (int64_t i = 0; i < g.dk; ++i)
                for (int64_t j = 0; j < g.dv; ++j) Sh[i * g.dv + j] += kn[i] * u[j];
            for (int64_t j = 0; j < g.dv; ++j) {
                double o = 0.0;
                for (int64_t i = 0; i < g.dk; ++i) o += Sh[i * g.dv + j] * qn[i];
                out[static_cast<size_t>((t * g.Hv + h) * g.dv + j)] = o;
            }
        }
    }
    g.state.assign(S.begin(), S.end());
    return out;
}

// Runs the backend op on g (rows [t0, t0 + n)) with the state tensor st.
std::vector<float> run_gdn(CpuBackend& be, const Gdn& g, Tensor& st, int64_t t0, int64_t n) {
    Tensor q = be.upload_raw(g.q.data() + t0 * g.Hk * g.dk, DType::F32, {n, g.Hk, g.dk});
    Tensor k = be.upload_raw(g.k.data() + t0 * g.Hk * g.dk, DType::F32, {n, g.Hk, g.dk});
    Tensor v = be.upload_raw(g.v.data() + t0 * g.Hv * g.dv, DType::F32, {n, g.Hv, g.dv});
    Tensor a = be.upload_raw(g.a.data() + t0 * g.Hv, DType::F32, {n, g.Hv});
    Tensor b = be.upload_raw(g.b.data() + t0 * g.Hv, DType::F32, {n, g.Hv});
    Tensor A = be.upload_raw(g.A_log.data(), DType::F32, {g.Hv});
    Tensor dt = be.upload_raw(g.dt_bias.data(), DType::F32, {g.Hv});
    Tensor out = be.scratch(DType::F32, {n, g.Hv, g.dv});
    be.gated_delta_rule(q, k, v, a, b, A, dt, st, out);
    return host(be, out);
}

Gdn random_gdn(int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, uint32_t seed) {
    Gdn g{T, Hk, Hv, dk, dv, randn(T * Hk * dk, seed), randn(T * Hk * dk, seed + 1), randn(T * Hv * dv, seed + 2),
          randn(T * Hv, seed + 3), randn(T * Hv, seed + 4), {}, randn(Hv, seed + 5, 0.5f), randn(Hv * dk * dv, seed + 6, 0.3f)};
    for (int64_t h = 0; h < Hv; ++h) g.A_log.push_back(std::log(1.0f + static_cast<float>(h % 5) * 3.0f));
    return g;
}

TEST(CpuGdn, MatchesDoubleReference) {
    for (auto [Hk, Hv] : {std::pair<int64_t, int64_t>{2, 4}, {1, 3}, {3, 3}})
        for (int64_t T : {1, 3, 17, 65}) {
            Gdn g = random_gdn(T, Hk, Hv, 16, 12, static_cast<uint32_t>(T * 10 + Hv));
            CpuBackend be;
            Tensor st = be.alloc_persistent(DType::F32, {Hv, 16, 12});
            be.from_host(st, g.state.data());
            const std::vector<float> got = run_gdn(be, g, st, 0, T);
            const std::vector<double> want = ref_gdn(g);
            test::expect_close(got, want, 1e-4, 1e-5, "gdn out");
            test::expect_close(host(be, st), std::vector<double>(g.state.begin(), g.state.end()), 1e-4, 1e-5, "gdn state");
        }
}

TEST(CpuGdn, PiecesEqualWhole) {
    Gdn g = random_gdn(20, 2, 4, 8, 8, 99);
    CpuBackend be;
    Tensor s1 = be.alloc_persistent(DType::F32, {4, 8, 8}), s2 = be.alloc_persistent(DType::F32, {4, 8, 8});
    const std::vector<float> whole = run_gdn(be, g, s1, 0, 20);
    std::vector<float> pieces;
    int64_t pos = 0;
    for (int64_t n : {1, 6, 1, 12}) {
        const auto o = run_gdn(be, g, s2, pos, n);
        pieces.insert(pieces.end(), o.begin(), o.end());
        pos += n;
    }
    EXPECT_EQ(whole, pieces);  // token-by-token either way: bitwise equal
    EXPECT_EQ(host(be, s1), host(be, s2));
}

TEST(CpuGdn, MatchesTransformersFixture) {
    SafetensorsFile f(test::fixtures_dir() + "/gdn/gdn_recurrent.safetensors");
    for (const std::string p : {"c0.", "c1."}) {
        auto get = [&](const std::string& n) { return f.tensors().at(p + n); };
        const TensorInfo& q = get("q");
        const TensorInfo& v = get("v");
        Gdn g{q.shape[0], q.shape[1], v.shape[1], q.shape[2], v.shape[2], q.to_f32(), get("k").to_f32(), v.to_f32(),
              get("a").to_f32(), get("b").to_f32(), get("A_log").to_f32(), get("dt_bias").to_f32(), get("state0").to_f32()};
        CpuBackend be;
        Tensor st = be.alloc_persistent(DType::F32, {g.Hv, g.dk, g.dv});
        be.from_host(st, g.state.data());
        const std::vector<float> out = run_gdn(be, g, st, 0, g.T);
        const std::vector<float> want = get("out").to_f32(), want_state = get("state1").to_f32();
        test::expect_close(out, std::vector<double>(want.begin(), want.end()), 1e-4, 1e-5, p + "out");
        test::expect_close(host(be, st), std::vector<double>(want_state.begin(), want_state.end()), 1e-4, 1e-5, p + "state");
    }
}

}  // namespace
}  // namespace grimoire
