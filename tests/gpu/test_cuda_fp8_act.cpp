// The FP8-activation form of the 1..16-row FP8 kernel (quant_qmv.cuh F8X, forced by cuda::kQmmFp8Act; the
// model takes it under GRIMOIRE_FP8_MMA=1) on the H200; skipped without a GPU.
//
//   - Each row is W8A8 as the CPU oracle defines it: x quantized per 128 channels (kernels/cpu/dequant.h
//     quantize_act_fp8), the E4M3 products summed per 128-channel block and scaled by the weight block's and
//     the row's scales. Against fp64 over the oracle's dequantized activations (e4m3(q) * s) and the exact
//     weight, within 2^-8 |want| + 1e-3 sum|w x|, the W8A8 prefill test's bound (test_cuda_w8a8.cpp): the FP8
//     tensor cores accumulate a block's 128 products with ~14 bits. What it must catch are byte orders,
//     scales and warp ranges: a permuted channel or a wrong block scale (the activations' blocks differ up to
//     1e5 in magnitude) moves outputs by tens of percent.
//   - One row is bit for bit row 0 of the same x launched with more rows: the one-row blocks quantize x
//     themselves and 2..16 rows read quant_act_fp8's codes, so this checks the two quantizers agree and the
//     sums do not depend on the batch (what speculative verify needs of greedy decoding).
//   - Three launches bit-identical; NaN-poisoned output; narrow and wide weights (one- and two-tile blocks),
//     groups fewer than the block's 8 warps, a partial last n-tile.
//   - glu parts (2..8 rows): h equals silu(g) * u of the same launch's g and u rounded to BF16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cuda/quant.h"
#include "quant_test_util.h"

namespace grimoire {
namespace {

std::vector<float> fetch(const Tensor& y) {
    std::vector<float> got(static_cast<size_t>(y.numel()));
    EXPECT_EQ(cudaMemcpy(got.data(), y.data, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return got;
}

TEST(CudaFp8Act, RowsAreW8a8AndOneRowIsRowZero) {
    GRIMOIRE_REQUIRE_GPU();
    std::mt19937 rng(fresh_seed());
    int ran = 0;
    // (N, K): a partial n-tile and 3 groups (five warps without one); 9 groups; the 27B o_proj's K; a weight
    // of over 4 n-tiles per SM (two-tile blocks at 2..8 rows).
    for (const auto [N, K] : std::initializer_list<std::pair<int64_t, int64_t>>{
             {40, 384}, {2600, 1152}, {1000, 6144}, {8480, 1024}}) {
        if (!cuda::qmm_fp8_act_ok(1, N, K, 128, 128)) {
            std::printf("%lldx%lld: the FP8-activation form is not offered on this device, skipped\n",
                        static_cast<long long>(N), static_cast<long long>(K));
            continue;
        }
        ++ran;
        const Fp8Host h = random_fp8(N, K, true, rng);
        std::vector<float> w(static_cast<size_t>(N * K));
        cpu::dequant_fp8_rows({h.w.data(), h.scales.data(), h.N, h.K, h.bn, h.bk}, 0, h.N, w.data());
        DirectQmm q;
        q.fp8(h);
        Tensor y1(q.up(std::vector<float>(static_cast<size_t>(N), NAN).data(), static_cast<size_t>(N) * 4),
                  DType::F32, Device::CUDA, {1, N});
        for (int64_t M : {1, 2, 3, 5, 8, 9, 16}) {
            const std::string what = std::to_string(N) + "x" + std::to_string(K) + " M " + std::to_string(M);
            ASSERT_TRUE(cuda::qmm_fp8_act_ok(M, N, K, 128, 128)) << what;
            const std::vector<float> xv = blocky_x(M, K, rng);
            Tensor x = q.x_bf16(xv, M, K);
            const size_t ny = static_cast<size_t>(M * N);
            Tensor y(q.up(std::vector<float>(ny, NAN).data(), ny * 4), DType::F32, Device::CUDA, {M, N});
            std::vector<double> want, mag;
            w8a8_oracle(xv, w, M, N, K, want, mag);
            std::vector<float> first;
            for (int rep = 0; rep < 3; ++rep) {
                ASSERT_EQ(cudaMemset(y.data, 0xff, ny * 4), cudaSuccess);  // NaN poison
                cuda::qmm_fp8(q.d8, x, y, q.ws, nullptr, cuda::kQmmFp8Act);
                const std::vector<float> got = fetch(y);
                size_t bad = 0, worst = 0;
                double worst_err = -1;
                for (size_t i = 0; i < ny; ++i) {
                    const double err = std::fabs(double(got[i]) - want[i]) -
                                       (std::ldexp(std::fabs(want[i]), -8) + 1e-3 * mag[i]);
                    const bool nan = std::isnan(got[i]);
                    if (nan || err > 0) ++bad;
                    if (nan || err > worst_err) worst_err = nan ? 1e30 : err, worst = i;
                }
                EXPECT_EQ(bad, 0u) << what << " launch " << rep << ": worst at m " << worst / N << " n "
                                   << worst % N << " got " << got[worst] << " want " << want[worst] << " mag "
                                   << mag[worst];
                if (rep == 0)
                    first = got;
                else
                    EXPECT_EQ(std::memcmp(first.data(), got.data(), ny * 4), 0) << what << " launch " << rep;
            }
            if (M > 1) {  // x's row 0 alone
                ASSERT_EQ(cudaMemset(y1.data, 0xff, static_cast<size_t>(N) * 4), cudaSuccess);
                const Tensor x0(x.data, DType::BF16, Device::CUDA, {1, K});
                cuda::qmm_fp8(q.d8, x0, y1, q.ws, nullptr, cuda::kQmmFp8Act);
                const std::vector<float> one = fetch(y1);
                size_t differ = 0;
                for (int64_t n = 0; n < N; ++n)
                    differ +=
                        std::memcmp(&one[static_cast<size_t>(n)], &first[static_cast<size_t>(n)], 4) != 0;
                EXPECT_EQ(differ, 0u) << what << ": one row differs from row 0 of the " << M << "-row launch";
            }
        }
    }
    if (ran == 0) GTEST_SKIP() << "the FP8-activation form is not offered on this device";
}

// glu parts (a stacked [gate; up] weight into h = silu(g) * u, 2..8 rows): against the same launch without
// parts (BF16 y, as the stored halves are rounded), whose g and u are the same sums, so h differs from the
// host's silu(g) * u only by the device's exp and products: 1e-5 relative to |g| |u| + 1e-30.
TEST(CudaFp8Act, GluIsSiluOfTheSameSums) {
    GRIMOIRE_REQUIRE_GPU();
    std::mt19937 rng(fresh_seed());
    const int64_t N = 8448, K = 1024, I = N / 2;
    if (!cuda::qmm_fp8_act_ok(4, N, K, 128, 128) || !cuda::qmm_glu_ok(true, false, 4, N, K, 128, K / 128))
        GTEST_SKIP() << "the FP8-activation form or FP8 glu parts are not offered on this device";
    const Fp8Host h = random_fp8(N, K, true, rng);
    DirectQmm q;
    q.fp8(h);
    for (int64_t M : {2, 5, 8}) {
        const std::vector<float> xv = blocky_x(M, K, rng);
        Tensor x = q.x_bf16(xv, M, K);
        const size_t ny = static_cast<size_t>(M * N), nh = static_cast<size_t>(M * I);
        Tensor y(q.up(std::vector<uint16_t>(ny, 0xFFFF).data(), ny * 2), DType::BF16, Device::CUDA, {M, N});
        cuda::qmm_fp8(q.d8, x, y, q.ws, nullptr, cuda::kQmmFp8Act);
        std::vector<uint16_t> yb(ny);
        ASSERT_EQ(cudaMemcpy(yb.data(), y.data, ny * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        void* hd = q.up(std::vector<uint16_t>(nh, 0xFFFF).data(), nh * 2);
        Tensor ys(nullptr, DType::BF16, Device::CUDA, {M, N});  // shape and dtype only
        const cuda::QmmParts parts = glu_parts(N, hd);
        cuda::qmm_fp8(q.d8, x, ys, q.ws, nullptr, cuda::kQmmFp8Act, &parts);
        std::vector<uint16_t> hb(nh);
        ASSERT_EQ(cudaMemcpy(hb.data(), hd, nh * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        size_t bad = 0;
        for (int64_t m = 0; m < M; ++m)
            for (int64_t i = 0; i < I; ++i) {
                const double g = bf16_to_f32(yb[static_cast<size_t>(m * N + i)]);
                const double u = bf16_to_f32(yb[static_cast<size_t>(m * N + I + i)]);
                const double ref = g / (1.0 + std::exp(-g)) * u;
                const double got = bf16_to_f32(hb[static_cast<size_t>(m * I + i)]);
                // h is stored in BF16: its rounding (2^-9 relative) on top.
                bad += !(std::fabs(got - ref) <=
                         std::ldexp(std::fabs(ref), -8) + 1e-5 * std::fabs(g * u) + 1e-30);
            }
        EXPECT_EQ(bad, 0u) << "glu M " << M;
    }
}

}  // namespace
}  // namespace grimoire
