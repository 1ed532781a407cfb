// CUDA INT4 / FP8 linears vs the CPU oracle (kernels/cpu/dequant.h) on the H200; skipped without a GPU.
//
// Kernel level (fresh random weights and inputs every run, output poisoned with NaN before each launch):
//   M = 1..16 (qmm tensor-core kernel) and M = 17, 40 (dequant + cuBLAS) on odd shapes (N, K not multiples of
//   the 16 x 64 tiles), group sizes 32 / 64 / 128 / channel, act-order, symmetric and asymmetric zeros, F16 /
//   BF16 / F32 scales, FP8 128x128 blocks and per-channel. The reference is an fp64 sum over the exact
//   dequantized weight and the BF16 input. Tolerances: the qmm kernel multiplies exact (q - z) by BF16 x into
//   fp32 and applies the fp32 scale per group, so it differs from fp64 by fp32 summation only (~sqrt(K) * 6e-8
//   of sum|w x|): 2e-5 * sum|w x| passes that 10x over, while one wrong weight moves a result by ~1/K of sum|w x|
//   (>= 1e-3 at K <= 1000). The prefill path rounds W to BF16 first (2^-9 relative per weight): 3e-3 * sum|w x|;
//   an FP8 128 x 128-block weight's prefill may instead be W8A8 (check_linear's w8a8).
//   A stacked gate | up weight in one pass equals its parts then silu_mul bit for bit (check_glu).
//   The same forward run three times (direct, captured, replayed) must give identical bits: the split-K
//   reduction is deterministic and every launch leaves its arrival counters at zero.
// Fixtures: every tests/fixtures/quant layer dequantizes on the device to exactly the CPU's weight.
// Model: the tiny quantized Qwen3 fixtures in the F32 reference mode match the CPU to 1e-3 * max|logit|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>

#include "../test_util.h"
#include "gpu_test_util.h"
#include "quant_test_util.h"
#include "io/config.h"
#include "kernels/cpu/dequant.h"
#include "model/model.h"
#include "quant/linear.h"
#include "kernels/cuda/quant.h"
#include "quant/quantized.h"
#include "quant/repack.h"

namespace grimoire {
namespace {

Int4Host random_int4(int64_t N, int64_t K, int64_t gs, bool act, bool sym, int scale_kind, std::mt19937& rng) {
    Int4Host h;
    h.N = N, h.K = K;
    const int64_t group = gs > 0 ? gs : K;
    h.G = (K + group - 1) / group;
    h.q.resize(static_cast<size_t>(N * K));
    for (auto& v : h.q) v = static_cast<uint8_t>(rng() & 15);
    h.zeros.resize(static_cast<size_t>(h.G * N));
    for (auto& z : h.zeros) z = sym ? 8 : static_cast<int32_t>(rng() % 17);
    h.scales.resize(static_cast<size_t>(h.G * N));
    // BF16 scales below fp16's normal range (6e-5) are not fp16-exact, so the BF16 kernel variant runs.
    std::uniform_real_distribution<float> d(scale_kind == 1 ? 1e-7f : 1e-3f, scale_kind == 1 ? 5e-6f : 2e-2f);
    for (auto& s : h.scales) {
        const float v = d(rng);
        s = scale_kind == 0 ? f16_to_f32(f32_to_f16(v)) : scale_kind == 1 ? bf16_to_f32(f32_to_bf16(v)) : v;
    }
    std::vector<int32_t> order(static_cast<size_t>(K));
    std::iota(order.begin(), order.end(), 0);
    if (act) std::shuffle(order.begin(), order.end(), rng);
    h.g_idx.resize(static_cast<size_t>(K));
    for (int64_t i = 0; i < K; ++i) h.g_idx[static_cast<size_t>(order[static_cast<size_t>(i)])] = static_cast<int32_t>(i / group);
    return h;
}

// The CPU oracle's dequantized weight [N, K] f32 (its codes packed two a byte first, cpu::Int4Weights' layout).
std::vector<float> oracle_int4(const Int4Host& h) {
    const std::vector<uint8_t> packed = cpu::pack_int4(h.q.data(), h.N, h.K);
    std::vector<float> w(static_cast<size_t>(h.N * h.K));
    cpu::dequant_int4_rows({packed.data(), h.zeros.data(), h.scales.data(), h.g_idx.data(), h.N, h.K, h.G}, 0, h.N,
                           w.data());
    return w;
}

// Runs `lin` on M rows three times (direct / captured / replayed) and checks each against fp64.
// w8a8: the FP8 prefill of a 128 x 128-block weight, which takes the W8A8 GEMM where cuBLASLt offers it
// (GRIMOIRE_FP8_GEMM, quant_linear.cpp) and the dequant path elsewhere: the whole output must then match one of
// the two oracles, the BF16 one within `rel` or the quantized-activation one (quant_test_util.h w8a8_oracle)
// within test_cuda_w8a8's bound, 2^-8 |y| + 1e-3 sum|w x|.
void check_linear(CudaBackend& gpu, const Linear& lin, const std::vector<float>& w, int64_t M, double rel,
                  std::mt19937& rng, const std::string& what, bool w8a8 = false) {
    const int64_t N = lin.out_features(), K = lin.in_features();
    const std::vector<float> xv = test::rand_bf16(static_cast<size_t>(M * K), rng());
    std::vector<double> want, mag, want8, mag8;
    test::host_matmul(xv, w, M, N, K, want, mag);
    if (w8a8) w8a8_oracle(xv, w, M, N, K, want8, mag8);
    Tensor x = test::put(gpu, xv, DType::BF16, {M, K});
    Tensor y = gpu.alloc_persistent(DType::F32, {M, N});
    const std::vector<float> poison(static_cast<size_t>(M * N), NAN);
    std::vector<float> first;
    for (int rep = 0; rep < 3; ++rep) {
        gpu.from_host(y, poison.data());
        gpu.reset_scratch();
        lin.forward(gpu, x, y);
        const std::vector<float> got = test::get(gpu, y);
        size_t bad = 0, bad8 = 0, worst = 0;
        double worst_err = -1;
        for (size_t i = 0; i < got.size(); ++i) {
            const double err = std::fabs(double(got[i]) - want[i]) - (rel * mag[i] + 1e-12);
            if (std::isnan(got[i]) || err > 0) ++bad;
            if (std::isnan(got[i]) || err > worst_err) worst_err = std::isnan(got[i]) ? 1e30 : err, worst = i;
            const double bound8 = w8a8 ? std::ldexp(std::fabs(want8[i]), -8) + 1e-3 * mag8[i] : 0.0;
            if (w8a8 && !(std::fabs(double(got[i]) - want8[i]) <= bound8)) ++bad8;
        }
        EXPECT_TRUE(bad == 0 || (w8a8 && bad8 == 0))
            << what << " M " << M << " rep " << rep << ": " << bad << " outside the BF16 oracle's bound"
            << (w8a8 ? " and " + std::to_string(bad8) + " outside the W8A8 oracle's" : std::string())
            << "; worst at m " << worst / N << " n " << worst % N << " got " << got[worst] << " want "
            << want[worst] << " mag " << mag[worst];
        if (rep == 0) first = got;
        else EXPECT_TRUE(std::memcmp(first.data(), got.data(), got.size() * 4) == 0) << what << " M " << M << " rep " << rep << " differs from rep 0";
    }
    gpu.free_persistent(y);
    gpu.free_persistent(x);
}

struct Int4Case {
    int64_t N, K, gs;
    bool act, sym;
    int scale_kind;  // 0 f16, 1 bf16, 2 f32
};

class CudaInt4 : public ::testing::TestWithParam<Int4Case> {};

TEST_P(CudaInt4, MatchesOracleForEveryRowCount) {
    GRIMOIRE_REQUIRE_GPU();
    const Int4Case c = GetParam();
    std::mt19937 rng(fresh_seed());
    CudaBackend gpu(0, DType::BF16);
    Int4Host h = random_int4(c.N, c.K, c.gs, c.act, c.sym, c.scale_kind, rng);
    const std::vector<float> w = oracle_int4(h);
    auto lin = make_int4_linear(gpu, std::move(h), Tensor{}, "test int4", 0);
    const std::vector<float> back = lin->dequantize();
    EXPECT_TRUE(back == w) << "device copy does not dequantize to the oracle's weight";
    const std::string what = "int4 " + std::to_string(c.N) + "x" + std::to_string(c.K) + " g" + std::to_string(c.gs) +
                             (c.act ? " act" : "") + (c.sym ? " sym" : " asym");
    for (int64_t M : {1, 2, 3, 5, 8, 9, 15, 16}) check_linear(gpu, *lin, w, M, 2e-5, rng, what);
    for (int64_t M : {17, 40}) check_linear(gpu, *lin, w, M, 3e-3, rng, what + " prefill");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes,
    CudaInt4,
    ::testing::Values(Int4Case{16, 64, 64, false, true, 0},
                      Int4Case{17, 200, 32, false, false, 0},
                      Int4Case{1000, 384, 128, true, true, 1},
                      Int4Case{63, 1000, 0, false, false, 2},
                      Int4Case{65, 640, 64, true, false, 0},
                      Int4Case{3, 96, 32, true, true, 2},
                      Int4Case{1030, 2048, 128, false, true, 0},
                      Int4Case{300, 4160, 128, false, false, 1},
                      Int4Case{100, 320, 16, false, false, 1},
                      Int4Case{33, 1003, 0, false, true, 0},
                      Int4Case{70, 1280, 256, true, false, 0},
                      // >= 8 x 132 n-tiles (INT4 one row: >= 4 x 132; 2..8 rows: always): the qmv kernel's
                      // two-n-tile blocks (quant_qmv.cuh), with an odd n-tile count
                      Int4Case{9001, 320, 64, false, true, 1},
                      Int4Case{16900, 200, 64, false, false, 0},
                      Int4Case{17001, 640, 128, true, true, 2},
                      // g64 / g128 over K of 1024 to 8192 channels, asymmetric and act-order, from three
                      // n-tiles to more than the grid's slots
                      Int4Case{2100, 1024, 64, false, false, 0},
                      Int4Case{777, 1536, 128, true, false, 1},
                      Int4Case{40, 8192, 128, false, true, 2},
                      Int4Case{20000, 1024, 128, false, false, 0},
                      // 132 to 396 n-tiles of g128 over K a multiple of 1024: one to three n-tiles per
                      // SM, a partial last n-tile, one group per warp at K = 1024
                      Int4Case{2600, 3072, 128, false, true, 0},
                      Int4Case{5120, 2048, 128, true, false, 1},
                      Int4Case{3001, 1024, 128, false, false, 2},
                      // 4 to 8 x 132 n-tiles of g128 over K a multiple of 1024: the two-tile forms with one
                      // chunk in flight (9..16 rows; 2..8 rows too past 3 x 132 two-tile blocks) on the
                      // fixed-group loop, a partial last n-tile
                      Int4Case{12300, 2048, 128, false, true, 0},
                      Int4Case{14001, 1024, 128, true, false, 1},
                      // K = 6144 and 6080 (12 chunks a warp, and 11-12 with a half group at the end) on one-tile
                      // blocks: with GRIMOIRE_QMV_DEEP=1 (tools/gpu_check.sh's rerun) one row takes the
                      // shared-memory ring at its full depth, on the fixed-group and the general loop
                      Int4Case{330, 6144, 128, false, false, 1},
                      Int4Case{161, 6080, 128, true, true, 0}));

// Groups the qmm kernel does not take (not 16, 32 or a multiple of 64 channels) run every M through the
// dequant + GEMM path: BF16-rounded weights, so the prefill tolerance applies to every M.
TEST(CudaInt4OddGroups, DequantPathForEveryRowCount) {
    GRIMOIRE_REQUIRE_GPU();
    std::mt19937 rng(fresh_seed());
    CudaBackend gpu(0, DType::BF16);
    EXPECT_FALSE(cuda::qmm_supported(96, 5));
    EXPECT_TRUE(cuda::qmm_supported(128, 5) && cuda::qmm_supported(32, 5) && cuda::qmm_supported(96, 1));
    Int4Host h = random_int4(50, 480, 96, false, false, 0, rng);
    const std::vector<float> w = oracle_int4(h);
    auto lin = make_int4_linear(gpu, std::move(h), Tensor{}, "test int4 g96", 0);
    for (int64_t M : {1, 7, 16, 17}) check_linear(gpu, *lin, w, M, 3e-3, rng, "int4 50x480 g96");
}

struct Fp8Case {
    int64_t N, K;
    bool block;
};
class CudaFp8 : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(CudaFp8, MatchesOracleForEveryRowCount) {
    GRIMOIRE_REQUIRE_GPU();
    const Fp8Case c = GetParam();
    std::mt19937 rng(fresh_seed());
    CudaBackend gpu(0, DType::BF16);
    Fp8Host h = random_fp8(c.N, c.K, c.block, rng);
    std::vector<float> w(static_cast<size_t>(c.N * c.K));
    cpu::dequant_fp8_rows({h.w.data(), h.scales.data(), h.N, h.K, h.bn, h.bk}, 0, h.N, w.data());
    auto lin = make_fp8_linear(gpu, std::move(h), Tensor{}, "test fp8", 0);
    EXPECT_TRUE(lin->dequantize() == w) << "device copy does not dequantize to the oracle's weight";
    const std::string what = "fp8 " + std::to_string(c.N) + "x" + std::to_string(c.K) + (c.block ? " block" : " channel");
    for (int64_t M : {1, 2, 4, 7, 8, 11, 16}) check_linear(gpu, *lin, w, M, 2e-5, rng, what);
    for (int64_t M : {17, 64})
        check_linear(gpu, *lin, w, M, 3e-3, rng, what + " prefill", c.block && c.K % 128 == 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes,
                         CudaFp8,
                         ::testing::Values(Fp8Case{16, 64, true},
                                           Fp8Case{300, 260, true},
                                           Fp8Case{17, 1000, false},
                                           Fp8Case{1030, 2048, true},
                                           Fp8Case{129, 4160, false},
                                           Fp8Case{17001, 300, true},
                                           // >= 4 x 132 n-tiles, per-channel: the two-tile 9..16-row form
                                           Fp8Case{9000, 512, false},
                                           // 163 and 320 n-tiles: one and two per SM (132 SMs)
                                           Fp8Case{2600, 3072, true},
                                           Fp8Case{5120, 1024, true}));

// A stacked gate | up weight in one pass (Linear::forward_glu, quant.h QmmParts::glu): bit for bit the two parts
// (themselves checked against fp64 above) followed by silu_mul, for every row count the pass is offered at
// (INT4 1..16, FP8 2..8; elsewhere the default forward_split + silu_mul), on narrow (one-tile blocks otherwise), two-tile and wide weights with an odd n-tile
// count per half, asymmetric / act-order INT4 and block / per-channel FP8; the output poisoned before each run.
void check_glu(CudaBackend& gpu, const Linear& lin, bool fp8, std::mt19937& rng, const std::string& what) {
    const int64_t N = lin.out_features(), K = lin.in_features(), I = N / 2;
    // GRIMOIRE_QMV=0 (gpu_check.sh's reruns) sends every launch to the other kernels, which take no glu parts.
    const char* qmv_env = std::getenv("GRIMOIRE_QMV");
    const bool qmv_off = qmv_env && qmv_env[0] == '0';
    for (int64_t M : {1, 2, 4, 8, 9, 16}) {
        const bool offered = lin.offers_glu(M);
        // Not offered: Linear's default, checked too.
        EXPECT_EQ(offered, !qmv_off && (!fp8 || (M >= 2 && M <= 8))) << what << " M " << M;
        Tensor x = test::put(gpu, test::rand_bf16(static_cast<size_t>(M * K), rng()), DType::BF16, {M, K});
        Tensor g = gpu.alloc_persistent(DType::BF16, {M, I}), u = gpu.alloc_persistent(DType::BF16, {M, I});
        Tensor want = gpu.alloc_persistent(DType::BF16, {M, I}), h = gpu.alloc_persistent(DType::BF16, {M, I});
        Tensor parts[2] = {g, u};
        gpu.reset_scratch();
        lin.forward_split(gpu, x, parts);
        gpu.silu_mul(g, u, want);
        const std::vector<float> ref = test::get(gpu, want);
        const std::vector<float> poison(static_cast<size_t>(M * I), NAN);
        for (int rep = 0; rep < 3; ++rep) {  // direct, captured, replayed
            gpu.from_host(h, poison.data());
            gpu.reset_scratch();
            lin.forward_glu(gpu, x, h);
            const std::vector<float> got = test::get(gpu, h);
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < got.size(); ++i)
                if (std::memcmp(&got[i], &ref[i], 4) != 0 && bad++ == 0) first = i;
            EXPECT_EQ(bad, 0u) << what << " M " << M << " rep " << rep << ": first at m " << first / I << " n "
                               << first % I << " got " << got[first] << " want " << ref[first];
        }
        for (Tensor* t : {&x, &g, &u, &want, &h}) gpu.free_persistent(*t);
    }
}

TEST(CudaQuantGlu, OnePassEqualsPartsThenSiluMul) {
    GRIMOIRE_REQUIRE_GPU();
    std::mt19937 rng(fresh_seed());
    CudaBackend gpu(0, DType::BF16);
    struct Case {
        int64_t I, K, gs;
        bool act, sym;
        int scale_kind;
    };
    for (const Case& c : {Case{400, 1088, 64, true, false, 0}, Case{4240, 640, 128, false, true, 1},
                          Case{8464, 320, 64, false, false, 2}}) {
        auto lin = make_int4_linear(gpu, random_int4(2 * c.I, c.K, c.gs, c.act, c.sym, c.scale_kind, rng), Tensor{},
                                    "test int4", 0);
        check_glu(gpu, *lin, false, rng, "int4 I " + std::to_string(c.I) + " K " + std::to_string(c.K));
    }
    for (const auto& [I, K, block] : {std::tuple<int64_t, int64_t, bool>{400, 1088, true}, {4240, 640, false},
                                      {8464, 320, true}}) {
        auto lin = make_fp8_linear(gpu, random_fp8(2 * I, K, block, rng), Tensor{}, "test fp8", 0);
        check_glu(gpu, *lin, true, rng, "fp8 I " + std::to_string(I) + " K " + std::to_string(K));
    }
}

// The q | k | v | z in_proj of a DeltaNet layer with the conv done as the kernel stores the q | k | v part
// (Linear::forward_split_conv, quant.h QmmParts::conv; one row on every kernel, 2..16 rows on the one-pass
// kernel, a thread per column running its rows in order): bit for bit the parts stored, then conv1d_silu
// (Linear's default), for the conv output, z and the conv state, over steps that run direct, captured and
// replayed, with F32 and BF16 conv weights and the outputs poisoned before each run.
void check_conv(CudaBackend& gpu, const Linear& lin, int64_t C, DType wdt, std::mt19937& rng, const std::string& what) {
    const int64_t K = lin.in_features(), Z = lin.out_features() - C, Kc = 4;
    Tensor cw = test::put(gpu, test::rand_bf16(static_cast<size_t>(C * Kc), rng(), -0.6f, 0.6f), wdt, {C, Kc});
    const auto s0 = test::rand_bf16(static_cast<size_t>((Kc - 1) * C), rng(), -2, 2);
    Tensor s_ref = test::put(gpu, s0, DType::BF16, {Kc - 1, C}), s_got = test::put(gpu, s0, DType::BF16, {Kc - 1, C});
    auto same = [&](const Tensor& a, const Tensor& b, const std::string& which) {
        const std::vector<float> ga = test::get(gpu, a), gb = test::get(gpu, b);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < ga.size(); ++i)
            if (std::memcmp(&ga[i], &gb[i], 4) != 0 && bad++ == 0) first = i;
        EXPECT_EQ(bad, 0u) << what << " " << which << ": first at " << first << " got " << ga[first] << " want "
                           << gb[first];
    };
    ASSERT_TRUE(lin.offers_conv(1, cw, s_got)) << what;
    EXPECT_FALSE(lin.offers_conv(17, cw, s_got)) << what;
    for (int64_t M : {1, 2, 3, 8, 16}) {
        if (!lin.offers_conv(M, cw, s_got)) continue;  // then the model runs Linear's default, the reference here
        Tensor c_ref = gpu.alloc_persistent(DType::BF16, {M, C}), z_ref = gpu.alloc_persistent(DType::BF16, {M, Z});
        Tensor c_got = gpu.alloc_persistent(DType::BF16, {M, C}), z_got = gpu.alloc_persistent(DType::BF16, {M, Z});
        const std::vector<float> poison_c(static_cast<size_t>(M * C), NAN), poison_z(static_cast<size_t>(M * Z), NAN);
        for (int rep = 0; rep < 4; ++rep) {  // direct, direct (seen once), captured, replayed
            Tensor x = test::put(gpu, test::rand_bf16(static_cast<size_t>(M * K), rng()), DType::BF16, {M, K});
            Tensor ref[2] = {c_ref, z_ref}, got[2] = {c_got, z_got};
            gpu.reset_scratch();
            lin.Linear::forward_split_conv(gpu, x, ref, cw, s_ref);
            gpu.from_host(c_got, poison_c.data());
            gpu.from_host(z_got, poison_z.data());
            gpu.reset_scratch();
            lin.forward_split_conv(gpu, x, got, cw, s_got);
            const std::string r = " M " + std::to_string(M) + " rep " + std::to_string(rep);
            same(c_got, c_ref, "conv out" + r);
            same(z_got, z_ref, "z" + r);
            same(s_got, s_ref, "conv state" + r);
            gpu.free_persistent(x);
        }
        for (Tensor* t : {&c_ref, &z_ref, &c_got, &z_got}) gpu.free_persistent(*t);
    }
    for (Tensor* t : {&cw, &s_ref, &s_got}) gpu.free_persistent(*t);
}

TEST(CudaQuantConv, OneRowConvEqualsPartsThenConv) {
    GRIMOIRE_REQUIRE_GPU();
    std::mt19937 rng(fresh_seed());
    CudaBackend gpu(0, DType::BF16);
    // C + Z columns: C not a multiple of 16 (the part boundary inside an n-tile), the 27B layer's shape.
    for (const auto& [C, Z, K] : {std::tuple<int64_t, int64_t, int64_t>{200, 72, 640}, {10240, 6144, 5120}}) {
        auto l4 = make_int4_linear(gpu, random_int4(C + Z, K, 128, false, true, 0, rng), Tensor{}, "test int4", 0);
        check_conv(gpu, *l4, C, DType::F32, rng, "int4 C " + std::to_string(C));
        auto la = make_int4_linear(gpu, random_int4(C + Z, K, 64, true, false, 1, rng), Tensor{}, "test int4", 0);
        check_conv(gpu, *la, C, DType::BF16, rng, "int4 asym act-order C " + std::to_string(C));
        auto l8 = make_fp8_linear(gpu, random_fp8(C + Z, K, true, rng), Tensor{}, "test fp8", 0);
        check_conv(gpu, *l8, C, DType::F32, rng, "fp8 C " + std::to_string(C));
    }
}

// Every fixture layer written by tools/quantize.py: the CUDA linear holds exactly the CPU's weight.
TEST(CudaQuantFixtures, DeviceWeightsEqualCpuWeights) {
    GRIMOIRE_REQUIRE_GPU();
    std::mt19937 rng(fresh_seed());
    CudaBackend gpu(0, DType::BF16);
    auto cpu = make_cpu_backend();
    for (const char* f : {"gptq_sym_g128", "gptq_asym_g32_actorder", "gptq_v2_asym_g64", "gptq_v2_sym_actorder_chan",
                          "autoround_gptq_asym_g128", "autoround_awq_asym_g64", "autoround_awq_sym_g128", "ct_sym_g32",
                          "ct_asym_g128", "ct_asym_g64", "ct_asym_chan", "fp8_block", "fp8_channel"}) {
        const std::string dir = test::fixtures_dir() + "/quant/" + f;
        Checkpoint ckpt(dir);
        const QuantConfig qc = QuantConfig::from_config(ConfigReader::from_file(dir + "/config.json"));
        for (const char* m : {"layer.q_proj", "layer.up_proj", "layer.odd_proj"}) {
            auto lc = load_linear(*cpu, ckpt, m, qc);
            auto lg = load_linear(gpu, ckpt, m, qc);
            const std::vector<float> w = lc->dequantize();
            EXPECT_TRUE(lg->dequantize() == w) << f << " " << m;
            if (lc->format() == "BF16" || ckpt.find(std::string(m) + ".bias")) continue;
            for (int64_t M : {1, 4, 16}) check_linear(gpu, *lg, w, M, 2e-5, rng, std::string(f) + " " + m);
        }
    }
}

class CudaQuantModel : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaQuantModel, F32ModeMatchesCpu) {
    GRIMOIRE_REQUIRE_GPU();
    const std::string dir = test::fixtures_dir() + "/quant/" + GetParam();
    auto cpu = make_cpu_backend();
    CudaBackend gpu(0, DType::F32);
    auto mc = load_model(dir, *cpu);
    auto mg = load_model(dir, gpu);
    SafetensorsFile ref(dir + "/reference.safetensors");
    for (int p = 0; ref.tensors().count("prompt_" + std::to_string(p)); ++p) {
        const TensorInfo& pi = ref.tensors().at("prompt_" + std::to_string(p));
        std::vector<int32_t> ids(static_cast<size_t>(pi.numel()));
        std::memcpy(ids.data(), pi.data, pi.nbytes);
        const int64_t T = static_cast<int64_t>(ids.size());
        auto sc = mc->new_state(T), sg = mg->new_state(T);
        std::vector<float> lc, lg;
        mc->forward(*sc, ids, T, lc);
        mg->forward(*sg, ids, T, lg);
        double mx = 0;
        for (float v : lc) mx = std::max(mx, double(std::fabs(v)));
        test::expect_close(lg, lc, 1e-3 * mx + 1e-3, 0, GetParam() + " prompt " + std::to_string(p));
    }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaQuantModel,
                         ::testing::Values("qwen3_gptq", "qwen3_awq", "qwen3_ct", "qwen3_ct_asym", "qwen3_fp8"));

}  // namespace
}  // namespace grimoire

namespace grimoire {
namespace {

// The stream-K split directly: a forced small grid makes grid blocks cover several column blocks and cut others
// in the middle (whole, first-partial and last-partial segments in one launch), on an act-order asymmetric weight.
TEST(CudaQmmStreamK, AnyGridSizeGivesTheSameResult) {
    GRIMOIRE_REQUIRE_GPU();
    std::mt19937 rng(fresh_seed());
    const int64_t N = 1030, K = 2048;
    Int4Host h = random_int4(N, K, 128, true, false, 0, rng);
    const std::vector<float> w = oracle_int4(h);
    DirectQmm q;
    q.int4(h);
    ASSERT_EQ(q.d4.scale_dtype, DType::F16);
    const cuda::Int4Dev& d = q.d4;
    const cuda::QmmWorkspace& ws = q.ws;
    for (int64_t M : {1, 7, 16}) {
        const std::vector<float> xv = test::rand_bf16(static_cast<size_t>(M * K), rng());
        Tensor x = q.x_bf16(xv, M, K);
        Tensor y(q.up(std::vector<float>(static_cast<size_t>(M * N), NAN).data(), static_cast<size_t>(M * N) * 4),
                 DType::F32, Device::CUDA, {M, N});
        std::vector<double> want, mag;
        test::host_matmul(xv, w, M, N, K, want, mag);
        for (int blocks : {1, 5, 13, 64}) {
            ASSERT_EQ(cudaMemset(y.data, 0xff, static_cast<size_t>(M * N) * 4), cudaSuccess);  // NaN poison
            cuda::qmm_int4(d, x, y, ws, nullptr, blocks);
            std::vector<float> got(static_cast<size_t>(M * N));
            ASSERT_EQ(cudaMemcpy(got.data(), y.data, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
            size_t bad = 0;
            for (size_t i = 0; i < got.size(); ++i) bad += !(std::fabs(got[i] - want[i]) <= 2e-5 * mag[i] + 1e-12);
            EXPECT_EQ(bad, 0u) << "M " << M << " blocks " << blocks;
        }
        // Split column blocks are summed by whichever grid block arrives last, in a fixed order, so repeated
        // launches (back to back, overlapping through programmatic dependent launch on Hopper) must give
        // bit-identical results and leave the arrival counters at zero for the next launch.
        std::vector<uint32_t> first;
        for (int rep = 0; rep < 6; ++rep) {
            ASSERT_EQ(cudaMemset(y.data, 0xff, static_cast<size_t>(M * N) * 4), cudaSuccess);
            cuda::qmm_int4(d, x, y, ws, nullptr, rep < 3 ? 0 : 7);
            std::vector<uint32_t> got(static_cast<size_t>(M * N));
            ASSERT_EQ(cudaMemcpy(got.data(), y.data, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
            if (rep == 0 || rep == 3) first = got;
            else EXPECT_EQ(got, first) << "M " << M << " launch " << rep;
        }
    }
}

}  // namespace
}  // namespace grimoire

namespace grimoire {
namespace {

// The prefill path's BF16 weight (dequant_* with a BF16 output, then a GEMM) is the oracle's exact fp32 weight
// rounded once to the nearest BF16: every element, on odd shapes, every scale type, act-order and FP8.
TEST(CudaDequant, Bf16IsTheOracleRoundedOnce) {
    GRIMOIRE_REQUIRE_GPU();
    std::mt19937 rng(fresh_seed());
    std::vector<void*> bufs;
    auto up = [&](const void* src, size_t bytes) -> void* {
        if (bytes == 0) return nullptr;
        void* d = nullptr;
        EXPECT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
        EXPECT_EQ(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
        bufs.push_back(d);
        return d;
    };
    auto check = [&](const std::vector<float>& w, auto&& run, const std::string& what) {
        void* out = nullptr;
        ASSERT_EQ(cudaMalloc(&out, w.size() * 2), cudaSuccess);
        ASSERT_EQ(cudaMemset(out, 0xff, w.size() * 2), cudaSuccess);  // NaN poison
        run(out);
        std::vector<uint16_t> got(w.size());
        ASSERT_EQ(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        size_t bad = 0;
        for (size_t i = 0; i < w.size(); ++i) bad += got[i] != f32_to_bf16(w[i]);
        EXPECT_EQ(bad, 0u) << what;
        cudaFree(out);
    };
    for (const Int4Case& c : {Int4Case{17, 200, 32, false, false, 0}, Int4Case{1000, 384, 128, true, true, 1},
                              Int4Case{63, 1000, 0, false, false, 2}, Int4Case{100, 320, 16, false, false, 1},
                              Int4Case{50, 480, 96, true, false, 0}}) {
        Int4Host h = random_int4(c.N, c.K, c.gs, c.act, c.sym, c.scale_kind, rng);
        const std::vector<float> w = oracle_int4(h);
        const PackedInt4 p = repack_int4(h);
        cuda::Int4Dev d;
        d.N = p.N, d.K = p.K, d.G = p.G, d.group_size = p.group_size, d.NT = p.NT, d.KC = p.KC;
        d.scale_dtype = p.scale_type == ScaleType::F16 ? DType::F16 : p.scale_type == ScaleType::BF16 ? DType::BF16 : DType::F32;
        d.words = static_cast<const uint32_t*>(up(p.words.data(), p.words.size() * 4));
        d.scales = up(p.scales.data(), p.scales.size());
        d.zeros = p.symmetric ? nullptr : static_cast<const uint8_t*>(up(p.zeros.data(), p.zeros.size()));
        d.perm = static_cast<const int32_t*>(up(p.perm.data(), p.perm.size() * 4));
        check(w, [&](void* out) { cuda::dequant_int4(d, out, DType::BF16, nullptr); },
              "int4 " + std::to_string(c.N) + "x" + std::to_string(c.K) + " g" + std::to_string(c.gs));
    }
    for (const Fp8Case& c : {Fp8Case{300, 260, true}, Fp8Case{17, 1000, false}, Fp8Case{129, 4160, false}}) {
        Fp8Host h = random_fp8(c.N, c.K, c.block, rng);
        std::vector<float> w(static_cast<size_t>(c.N * c.K));
        cpu::dequant_fp8_rows({h.w.data(), h.scales.data(), h.N, h.K, h.bn, h.bk}, 0, h.N, w.data());
        const PackedFp8 p = repack_fp8(h);
        cuda::Fp8Dev d;
        d.N = p.N, d.K = p.K, d.NT = p.NT, d.KC = p.KC, d.bn = p.bn, d.bk = p.bk, d.SN = p.SN, d.SG = p.SG;
        d.words = static_cast<const uint32_t*>(up(p.words.data(), p.words.size() * 4));
        d.scales = static_cast<const float*>(up(p.scales.data(), p.scales.size() * 4));
        check(w, [&](void* out) { cuda::dequant_fp8(d, out, DType::BF16, nullptr); },
              "fp8 " + std::to_string(c.N) + "x" + std::to_string(c.K));
    }
    for (void* b : bufs) cudaFree(b);
}

}  // namespace
}  // namespace grimoire
