// The W8A8 FP8 prefill path of 128 x 128-block FP8 weights (quant.h unpack_fp8 / quant_act_fp8 /
// gemm_fp8_block, CudaFp8Linear::prefill_parts: the default, which the test also forces with GRIMOIRE_FP8_GEMM=1)
// on the H200; skipped without a GPU, and the GEMM test also where cuBLASLt has no block-scaled FP8 (it is
// sm_90 only).
//
//   - The activation quantizer equals the CPU oracle (kernels/cpu/dequant.h quantize_act_fp8) code for code
//     and scale for scale, padding rows included: both take s and 1 / s in IEEE fp32 and round x * (1 / s) to
//     nearest even.
//   - unpack_fp8 gives back the checkpoint's codes byte for byte from the repacked tile layout.
//   - The linear's prefill equals fp64 over the oracle's dequantized activations (e4m3(q) * s) and the exact
//     dequantized weight, within 2^-8 * |want| + 1e-3 * sum|w x|. The BF16 output rounds by at most 2^-9
//     relative; the FP8 tensor cores accumulate a 128-channel block with ~14 bits (DeepSeek-V3 report), a few
//     2^-14 of the block's sum|w x| at worst. The codes are checked alone above, so what this test must catch
//     are the scale layouts and the parts: a wrong scale (they vary 20x between blocks) or a wrong row moves
//     outputs by tens of percent of |want|. Against the BF16-activation product the check would fail too, by
//     the activations' rounding (up to 2^-4 each).
//   - Direct parts (one GEMM each, written in place), the split fallback (parts off the 128-row blocks, M not
//     a multiple of 4), scales padded to a multiple of 4 blocks (K / 128 = 5), and three runs bit-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cuda/quant.h"
#include "quant/linear.h"
#include "quant/quantized.h"
#include "quant/repack.h"
#include "quant_test_util.h"

namespace grimoire {
namespace {

struct DevBuf {
    void* p = nullptr;
    explicit DevBuf(size_t n) { EXPECT_EQ(cudaMalloc(&p, n ? n : 1), cudaSuccess); }
    ~DevBuf() { cudaFree(p); }
    DevBuf(const DevBuf&) = delete;
    DevBuf& operator=(const DevBuf&) = delete;
};

TEST(CudaW8a8, ActQuantMatchesOracleCodeForCode) {
    GRIMOIRE_REQUIRE_GPU();
    std::mt19937 rng(fresh_seed());
    CudaBackend gpu(0, DType::BF16);
    for (const auto [M, K] :
         std::initializer_list<std::pair<int64_t, int64_t>>{{1, 128}, {5, 640}, {64, 5120}, {130, 1024}}) {
        const int64_t M4 = (M + 3) / 4 * 4, KB = K / 128;
        std::vector<float> xv = blocky_x(M, K, rng);
        for (int64_t k = 0; k < 128; ++k) xv[static_cast<size_t>(k)] = 0.0f;  // an all-zero block
        std::vector<uint8_t> want_q(static_cast<size_t>(M * K));
        std::vector<float> want_s(static_cast<size_t>(M * KB));
        cpu::quantize_act_fp8(xv.data(), M, K, 128, want_q.data(), want_s.data());
        Tensor x = test::put(gpu, xv, DType::BF16, {M, K});
        DevBuf q(static_cast<size_t>(M4 * K)), s(static_cast<size_t>(KB * M4) * 4);
        ASSERT_EQ(cudaMemset(q.p, 0xFF, static_cast<size_t>(M4 * K)), cudaSuccess);
        ASSERT_EQ(cudaMemset(s.p, 0xFF, static_cast<size_t>(KB * M4) * 4), cudaSuccess);
        cuda::quant_act_fp8(x, M4, static_cast<uint8_t*>(q.p), static_cast<float*>(s.p), nullptr);
        std::vector<uint8_t> got_q(static_cast<size_t>(M4 * K));
        std::vector<float> got_s(static_cast<size_t>(KB * M4));
        ASSERT_EQ(cudaMemcpy(got_q.data(), q.p, got_q.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(got_s.data(), s.p, got_s.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        size_t bad = 0;
        for (int64_t m = 0; m < M4; ++m)
            for (int64_t k = 0; k < K; ++k) {
                const uint8_t want = m < M ? want_q[static_cast<size_t>(m * K + k)] : 0;
                if (got_q[static_cast<size_t>(m * K + k)] != want && ++bad <= 3)
                    ADD_FAILURE() << "M " << M << " K " << K << ": code at m " << m << " k " << k << " is "
                                  << int(got_q[static_cast<size_t>(m * K + k)]) << ", oracle " << int(want);
            }
        for (int64_t m = 0; m < M4; ++m)
            for (int64_t b = 0; b < KB; ++b) {
                const float want = m < M ? want_s[static_cast<size_t>(m * KB + b)] : 0.0f;
                if (got_s[static_cast<size_t>(b * M4 + m)] != want && ++bad <= 6)
                    ADD_FAILURE() << "M " << M << " K " << K << ": scale at m " << m << " block " << b
                                  << " is " << got_s[static_cast<size_t>(b * M4 + m)] << ", oracle " << want;
            }
        EXPECT_EQ(bad, 0u) << "M " << M << " K " << K;
        gpu.free_persistent(x);
    }
}

TEST(CudaW8a8, UnpackGivesTheCheckpointCodes) {
    GRIMOIRE_REQUIRE_GPU();
    std::mt19937 rng(fresh_seed());
    for (const auto [N, K] : std::initializer_list<std::pair<int64_t, int64_t>>{
             {16, 128}, {300, 384}, {1030, 2048}, {5120, 640}}) {
        const Fp8Host h = random_fp8(N, K, true, rng);
        const PackedFp8 p = repack_fp8(h);
        cuda::Fp8Dev d;
        d.N = p.N, d.K = p.K, d.NT = p.NT, d.KC = p.KC, d.bn = p.bn, d.bk = p.bk, d.SN = p.SN, d.SG = p.SG;
        DevBuf words(p.words.size() * 4), out(static_cast<size_t>(N * K));
        ASSERT_EQ(cudaMemcpy(words.p, p.words.data(), p.words.size() * 4, cudaMemcpyHostToDevice),
                  cudaSuccess);
        ASSERT_EQ(cudaMemset(out.p, 0x7F, static_cast<size_t>(N * K)), cudaSuccess);  // NaN codes
        d.words = static_cast<const uint32_t*>(words.p);
        cuda::unpack_fp8(d, static_cast<uint8_t*>(out.p), nullptr);
        std::vector<uint8_t> got(static_cast<size_t>(N * K));
        ASSERT_EQ(cudaMemcpy(got.data(), out.p, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        size_t first = got.size();
        for (size_t i = 0; i < got.size() && first == got.size(); ++i)
            if (got[i] != h.w[i]) first = i;
        EXPECT_EQ(first, got.size()) << N << "x" << K << ": first difference at n " << first / K << " k "
                                     << first % K;
    }
}

// Sets GRIMOIRE_FP8_GEMM=1 for the scope (read when a linear is made), whatever the caller's environment says.
struct Fp8GemmOn {
    Fp8GemmOn() { setenv("GRIMOIRE_FP8_GEMM", "1", 1); }
    ~Fp8GemmOn() { unsetenv("GRIMOIRE_FP8_GEMM"); }
};

// Runs lin.forward_split (one part: forward) on M rows three times and checks the parts, concatenated,
// against fp64 over the quantized activations.
void check_w8a8(CudaBackend& gpu,
                const Linear& lin,
                const std::vector<float>& w,
                int64_t M,
                const std::vector<int64_t>& widths,
                std::mt19937& rng,
                const std::string& what) {
    const int64_t N = lin.out_features(), K = lin.in_features();
    const std::vector<float> xv = blocky_x(M, K, rng);
    std::vector<double> want, mag;
    w8a8_oracle(xv, w, M, N, K, want, mag);
    Tensor x = test::put(gpu, xv, DType::BF16, {M, K});
    std::vector<Tensor> ys;
    for (int64_t wd : widths) ys.push_back(gpu.alloc_persistent(DType::BF16, {M, wd}));
    std::vector<float> first;
    for (int rep = 0; rep < 3; ++rep) {
        for (Tensor& y : ys) test::poison(gpu, y);
        gpu.reset_scratch();
        if (ys.size() == 1)
            lin.forward(gpu, x, ys[0]);
        else
            lin.forward_split(gpu, x, std::span<Tensor>(ys));
        std::vector<float> got(static_cast<size_t>(M * N));
        int64_t c0 = 0;
        for (const Tensor& y : ys) {
            const std::vector<float> part = test::get(gpu, y);
            for (int64_t m = 0; m < M; ++m)
                for (int64_t c = 0; c < y.cols(); ++c)
                    got[static_cast<size_t>(m * N + c0 + c)] = part[static_cast<size_t>(m * y.cols() + c)];
            c0 += y.cols();
        }
        size_t bad = 0, worst = 0;
        double worst_err = -1;
        for (size_t i = 0; i < got.size(); ++i) {
            const double err =
                std::fabs(double(got[i]) - want[i]) - (std::ldexp(std::fabs(want[i]), -8) + 1e-3 * mag[i]);
            if (std::isnan(got[i]) || err > 0) ++bad;
            if (std::isnan(got[i]) || err > worst_err) worst_err = std::isnan(got[i]) ? 1e30 : err, worst = i;
        }
        EXPECT_EQ(bad, 0u) << what << " M " << M << " rep " << rep << ": worst at m " << worst / N << " n "
                           << worst % N << " got " << got[worst] << " want " << want[worst] << " mag "
                           << mag[worst];
        if (rep == 0)
            first = got;
        else
            EXPECT_TRUE(std::memcmp(first.data(), got.data(), got.size() * 4) == 0)
                << what << " M " << M << " rep " << rep << " differs from rep 0";
    }
    for (Tensor& y : ys) gpu.free_persistent(y);
    gpu.free_persistent(x);
}

TEST(CudaW8a8, PrefillMatchesQuantizedActivationOracle) {
    GRIMOIRE_REQUIRE_GPU();
    if (!cuda::gemm_fp8_block_ok(64, 256, 384, CudaBackend::cublas_workspace_bytes()))
        GTEST_SKIP() << "cuBLASLt offers no block-scaled FP8 GEMM on this device";
    std::mt19937 rng(fresh_seed());
    Fp8GemmOn on;
    CudaBackend gpu(0, DType::BF16);
    struct Case {
        int64_t N, K;
        std::vector<int64_t> widths;  // parts of forward_split ({N}: forward)
    };
    for (const Case& c :
         {Case{256, 384, {256}}, Case{2064, 1024, {2064}}, Case{5120, 640, {5120}},
          Case{2064, 1024, {1024, 1040}}, Case{2064, 1024, {1000, 1064}}, Case{768, 512, {256, 128, 384}}}) {
        Fp8Host h = random_fp8(c.N, c.K, true, rng);
        std::vector<float> w(static_cast<size_t>(c.N * c.K));
        cpu::dequant_fp8_rows({h.w.data(), h.scales.data(), h.N, h.K, h.bn, h.bk}, 0, h.N, w.data());
        auto lin = make_fp8_linear(gpu, std::move(h), Tensor{}, "test fp8", 0);
        std::string what = "w8a8 " + std::to_string(c.N) + "x" + std::to_string(c.K) + " parts";
        for (int64_t wd : c.widths) what += " " + std::to_string(wd);
        for (int64_t M : {17, 33, 64, 130}) check_w8a8(gpu, *lin, w, M, c.widths, rng, what);
    }
}

}  // namespace
}  // namespace grimoire
