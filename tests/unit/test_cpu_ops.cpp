// CPU kernels through the Backend interface against naive double-precision references written here:
// embedding, rmsnorm (both kinds), rmsnorm_gated, elementwise ops, copy_cols, add_bias, rope.
#include <gtest/gtest.h>

#include "test_cpu_util.h"

namespace grimoire {
namespace {

using test::expect_close;
using test::host;
using test::randn;

TEST(CpuOps, EmbeddingF32AndBF16) {
    CpuBackend be;
    const int64_t V = 37, H = 13;
    std::vector<float> table = randn(V * H, 1);
    std::vector<uint16_t> tb(table.size());
    for (size_t i = 0; i < table.size(); ++i) tb[i] = f32_to_bf16(table[i]);
    Tensor tf = be.upload_raw(table.data(), DType::F32, {V, H});
    Tensor tbf = be.upload_raw(tb.data(), DType::BF16, {V, H});
    for (int64_t T : {1, 3, 17}) {
        std::vector<int32_t> ids(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) ids[static_cast<size_t>(t)] = static_cast<int32_t>((t * 11 + 5) % V);
        Tensor it = be.upload_raw(ids.data(), DType::I32, {T});
        Tensor out = be.scratch(DType::F32, {T, H});
        be.embedding(tf, it, out);
        std::vector<float> got = host(be, out);
        be.embedding(tbf, it, out);
        std::vector<float> gotb = host(be, out);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h) {
                const size_t src = static_cast<size_t>(ids[static_cast<size_t>(t)] * H + h), dst = static_cast<size_t>(t * H + h);
                ASSERT_EQ(got[dst], table[src]);
                ASSERT_EQ(gotb[dst], bf16_to_f32(tb[src]));
            }
    }
}

std::vector<double> ref_rms(const std::vector<float>& x, const std::vector<float>& w, int64_t R, int64_t D, double eps,
                            bool plus_one) {
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < R; ++r) {
        double ss = 0.0;
        for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[r * D + i]) * x[r * D + i];
        const double inv = 1.0 / std::sqrt(ss / D + eps);
        for (int64_t i = 0; i < D; ++i) y[r * D + i] = x[r * D + i] * inv * (w[i] + (plus_one ? 1.0 : 0.0));
    }
    return y;
}

TEST(CpuOps, RmsNormPlainAndPlusOne) {
    CpuBackend be;
    for (int64_t R : {1, 3, 17, 65})
        for (int64_t D : {7, 64, 257}) {
            std::vector<float> x = randn(R * D, 2, 3.0f), w = randn(D, 3);
            Tensor xt = be.upload_raw(x.data(), DType::F32, {R, D}), wt = be.upload_raw(w.data(), DType::F32, {D});
            Tensor out = be.scratch(DType::F32, {R, D});
            be.rmsnorm(xt, wt, 1e-6f, NormKind::PLAIN, out);
            expect_close(host(be, out), ref_rms(x, w, R, D, 1e-6, false), 1e-5, 1e-6, "plain");
            be.rmsnorm(xt, wt, 1e-5f, NormKind::PLUS_ONE, xt);  // in place
            expect_close(host(be, xt), ref_rms(x, w, R, D, 1e-5, true), 1e-5, 1e-6, "plus_one");
        }
}

TEST(CpuOps, RmsNormGated) {
    CpuBackend be;
    for (int64_t R : {1, 3, 17})
        for (int64_t D : {5, 128}) {
            std::vector<float> x = randn(R * D, 4), z = randn(R * D, 5, 2.0f), w = randn(D, 6);
            std::vector<double> want = ref_rms(x, w, R, D, 1e-6, false);
            for (size_t i = 0; i < want.size(); ++i) want[i] *= z[i] / (1.0 + std::exp(-static_cast<double>(z[i])));
            Tensor xt = be.upload_raw(x.data(), DType::F32, {R, D}), zt = be.upload_raw(z.data(), DType::F32, {R, D});
            Tensor wt = be.upload_raw(w.data(), DType::F32, {D});
            Tensor out = be.scratch(DType::F32, {R, D});
            be.rmsnorm_gated(xt, zt, wt, 1e-6f, out);
            expect_close(host(be, out), want, 1e-5, 1e-6, "gated");
        }
}

TEST(CpuOps, Elementwise) {
    CpuBackend be;
    for (int64_t n : {int64_t{1}, int64_t{17}, (int64_t{1} << 16) + 3}) {  // the last one takes the multi-threaded path
        std::vector<float> a = randn(n, 7, 4.0f), b = randn(n, 8, 4.0f);
        Tensor at = be.upload_raw(a.data(), DType::F32, {n}), bt = be.upload_raw(b.data(), DType::F32, {n});
        Tensor out = be.scratch(DType::F32, {n});
        std::vector<double> want(a.size());
        be.add(at, bt, out);
        for (size_t i = 0; i < a.size(); ++i) want[i] = static_cast<double>(a[i]) + b[i];
        expect_close(host(be, out), want, 1e-7, 0, "add");
        be.silu_mul(at, bt, out);
        for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] / (1.0 + std::exp(-static_cast<double>(a[i]))) * b[i];
        expect_close(host(be, out), want, 1e-6, 1e-7, "silu_mul");
        be.copy(at, out);
        be.mul_sigmoid(out, bt);
        for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] / (1.0 + std::exp(-static_cast<double>(b[i])));
        expect_close(host(be, out), want, 1e-6, 1e-7, "mul_sigmoid");
        be.scale(out, -0.375f);
        for (double& v : want) v *= -0.375;
        expect_close(host(be, out), want, 1e-6, 1e-7, "scale");
    }
}

TEST(CpuOps, CopyColsAndAddBias) {
    CpuBackend be;
    const int64_t R = 5, C = 11;
    std::vector<float> src = randn(R * C, 9), bias = randn(4, 10);
    Tensor st = be.upload_raw(src.data(), DType::F32, {R, C});
    Tensor out = be.scratch(DType::F32, {R, 4});
    be.copy_cols(st, 6, out);
    std::vector<float> got = host(be, out);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < 4; ++c) ASSERT_EQ(got[r * 4 + c], src[r * C + 6 + c]);
    Tensor bt = be.upload_raw(bias.data(), DType::F32, {4});
    be.add_bias(out, bt);
    got = host(be, out);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < 4; ++c) ASSERT_EQ(got[r * 4 + c], src[r * C + 6 + c] + bias[c]);
    // Integer ids are copied bytewise too.
    std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6};
    Tensor it = be.upload_raw(ids.data(), DType::I32, {2, 3});
    Tensor io = be.scratch(DType::I32, {2, 1});
    be.copy_cols(it, 2, io);
    EXPECT_EQ(io.ptr<int32_t>()[0], 3);
    EXPECT_EQ(io.ptr<int32_t>()[1], 6);
}

TEST(CpuOps, RopeNeoxAndGptjPartial) {
    CpuBackend be;
    const int64_t H = 3, D = 10;
    for (bool neox : {true, false})
        for (int64_t T : {1, 3, 17}) {
            RopeParams p;
            p.rot_dim = 6;
            p.neox = neox;
            p.attn_factor = 1.25f;
            p.inv_freq = {1.0f, 0.1f, 0.01f};
            std::vector<float> x = randn(T * H * D, 11);
            std::vector<int32_t> pos(static_cast<size_t>(T));
            for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(t * 37 + 2);
            Tensor xt = be.upload_raw(x.data(), DType::F32, {T, H, D});
            Tensor pt = be.upload_raw(pos.data(), DType::I32, {T});
            be.rope(xt, pt, p);
            std::vector<double> want(x.begin(), x.end());
            for (int64_t t = 0; t < T; ++t)
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t i = 0; i < 3; ++i) {
                        const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + 3 : 2 * i + 1, b = (t * H + h) * D;
                        // The angle is defined as the fp32 product (as transformers computes it).
                        const double ang = static_cast<float>(pos[static_cast<size_t>(t)]) * p.inv_freq[static_cast<size_t>(i)];
                        const double c = std::cos(ang) * 1.25, s = std::sin(ang) * 1.25;
                        want[b + i0] = x[b + i0] * c - x[b + i1] * s;
                        want[b + i1] = x[b + i1] * c + x[b + i0] * s;
                    }
            expect_close(host(be, xt), want, 1e-5, 1e-6, neox ? "neox" : "gptj");
        }
}

}  // namespace
}  // namespace grimoire
