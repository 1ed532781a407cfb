// CpuBackend memory management and the matmul kernel against a double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"

namespace grimoire {
namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

TEST(CpuBackend, FactoryAndIdentity) {
    auto be = make_backend("cpu");
    ASSERT_TRUE(be);
    EXPECT_EQ(be->device(), Device::CPU);
    EXPECT_EQ(be->act_dtype(), DType::F32);
    EXPECT_NE(be->name().find("cpu"), std::string::npos);
    EXPECT_TRUE(make_backend("auto"));
    EXPECT_THROW(make_backend("tpu"), Error);
#ifndef GRIMOIRE_HAVE_CUDA
    std::string why;
    EXPECT_EQ(make_cuda_backend(&why), nullptr);
    EXPECT_NE(why.find("CUDA"), std::string::npos) << why;
    EXPECT_EQ(make_backend("auto")->device(), Device::CPU);
    try {
        make_backend("cuda");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("backend 'cuda' is not available"), std::string::npos) << e.what();
    }
#endif
}

TEST(CpuBackend, UploadConvertsAndCountsWeights) {
    CpuBackend be;
    std::vector<uint16_t> bf = {f32_to_bf16(1.5f), f32_to_bf16(-2.25f), f32_to_bf16(3.0f), f32_to_bf16(0.125f),
                                f32_to_bf16(7.0f), f32_to_bf16(-0.5f)};
    TensorInfo ti;
    ti.name = "w";
    ti.dtype = DType::BF16;
    ti.shape = {2, 3};
    ti.data = reinterpret_cast<const uint8_t*>(bf.data());
    ti.nbytes = bf.size() * 2;
    Tensor f = be.upload(ti, DType::F32);
    ASSERT_EQ(f.ndim, 2);
    EXPECT_EQ(f.dim(0), 2);
    EXPECT_EQ(f.dim(1), 3);
    EXPECT_FLOAT_EQ(f.ptr<float>()[1], -2.25f);
    EXPECT_FLOAT_EQ(f.ptr<float>()[5], -0.5f);
    Tensor b = be.upload(ti, DType::BF16);
    EXPECT_EQ(b.ptr<uint16_t>()[4], bf[4]);
    EXPECT_EQ(be.memory().weights, 6u * 4 + 6u * 2);
    be.free_persistent(b);
    EXPECT_EQ(be.memory().weights, 6u * 4);
    EXPECT_EQ(b.data, nullptr);
}

TEST(CpuBackend, PersistentIsZeroedAndCounted) {
    CpuBackend be;
    Tensor s = be.alloc_persistent(DType::F32, {3, 5});
    for (int i = 0; i < 15; ++i) EXPECT_EQ(s.ptr<float>()[i], 0.0f);
    EXPECT_EQ(be.memory().state, 60u);
    be.free_persistent(s);
    EXPECT_EQ(be.memory().state, 0u);
}

TEST(CpuBackend, ScratchNeverMovesAndResets) {
    CpuBackend be;
    Tensor a = be.scratch(DType::F32, {10});
    for (int i = 0; i < 10; ++i) a.ptr<float>()[i] = static_cast<float>(i);
    // Larger than one chunk: the arena grows without moving `a`.
    Tensor big = be.scratch(DType::F32, {int64_t{40} << 20});
    Tensor c = be.scratch(DType::F32, {7});
    EXPECT_NE(big.data, a.data);
    EXPECT_NE(c.data, a.data);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data) % 64, 0u);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(a.ptr<float>()[i], static_cast<float>(i));
    const size_t cap = be.memory().scratch;
    EXPECT_GE(cap, (size_t{40} << 22));
    be.reset_scratch();
    Tensor a2 = be.scratch(DType::F32, {10});
    Tensor big2 = be.scratch(DType::F32, {int64_t{40} << 20});
    Tensor a3 = be.scratch(DType::F32, {10});
    // After a reset the same sequence of requests fits in the merged chunk and repeats its addresses.
    be.reset_scratch();
    EXPECT_EQ(be.scratch(DType::F32, {10}).data, a2.data);
    EXPECT_EQ(be.scratch(DType::F32, {int64_t{40} << 20}).data, big2.data);
    EXPECT_EQ(be.scratch(DType::F32, {10}).data, a3.data);
    EXPECT_EQ(be.memory().scratch, cap);
}

TEST(CpuBackend, CopyZeroHostRoundTrip) {
    CpuBackend be;
    std::vector<float> h = randn(12, 1);
    Tensor t = be.alloc_persistent(DType::F32, {3, 4});
    be.from_host(t, h.data());
    Tensor u = be.alloc_persistent(DType::F32, {12});
    be.copy(t, u);
    std::vector<float> back(12);
    be.to_host(u, back.data());
    EXPECT_EQ(back, h);
    be.zero(u);
    be.to_host(u, back.data());
    for (float v : back) EXPECT_EQ(v, 0.0f);
}

void check_matmul(DType wdt, int64_t T, int64_t K, int64_t N) {
    CpuBackend be;
    std::vector<float> x = randn(static_cast<size_t>(T * K), 11), w = randn(static_cast<size_t>(N * K), 12);
    // Round the weight to its storage dtype first so the reference sees exactly what the kernel sees.
    std::vector<uint16_t> w16(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
        if (wdt == DType::BF16) { w16[i] = f32_to_bf16(w[i]); w[i] = bf16_to_f32(w16[i]); }
        if (wdt == DType::F16) { w16[i] = f32_to_f16(w[i]); w[i] = f16_to_f32(w16[i]); }
    }
    Tensor wt = wdt == DType::F32 ? be.upload_raw(w.data(), DType::F32, {N, K}) : be.upload_raw(w16.data(), wdt, {N, K});
    Tensor xt = be.upload_raw(x.data(), DType::F32, {T, K});
    Tensor out = be.scratch(DType::F32, {T, N});
    be.matmul(xt, wt, out);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n) {
            double ref = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; ++k) {
                ref += static_cast<double>(x[t * K + k]) * w[n * K + k];
                mag += std::fabs(static_cast<double>(x[t * K + k]) * w[n * K + k]);
            }
            // fp32 accumulation: error bounded by ~K * eps * sum|x w|, far tighter in practice.
            ASSERT_NEAR(out.ptr<float>()[t * N + n], ref, 1e-5 * mag + 1e-6)
                << "dtype " << dtype_name(wdt) << " T=" << T << " K=" << K << " N=" << N << " t=" << t << " n=" << n;
        }
}

TEST(CpuMatmul, MatchesDoubleReferenceOddShapes) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
        for (int64_t T : {1, 2, 3, 4, 17, 65})
            for (auto [K, N] : {std::pair<int64_t, int64_t>{7, 5}, {64, 33}, {300, 17}, {513, 40}})
                check_matmul(dt, T, K, N);
}

}  // namespace
}  // namespace grimoire
