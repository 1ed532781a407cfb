// CudaBackend::matmul_split (a stacked plain-weight projection group over several tokens): each part [T, n_i]
// equals x [T, K] times its rows of the stacked weight, computed on the host in fp64 from the same bf16 values,
// whether the backend runs one GEMM + split_cols (16-byte vector path when every width is a multiple of 8
// bf16, the scalar path otherwise) or a GEMM per part (set_stack_split(false)).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu_test_util.h"

namespace grimoire {
namespace {

// out [T, N] = x [T, K] w [N, K]^T in fp64, rounded to bf16 like the backend's output.
std::vector<float> host_matmul(const std::vector<float>& x, const std::vector<float>& w, int64_t T, int64_t K, int64_t N) {
    std::vector<float> out(static_cast<size_t>(T * N));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k)
                acc += static_cast<double>(x[static_cast<size_t>(t * K + k)]) * w[static_cast<size_t>(n * K + k)];
            out[static_cast<size_t>(t * N + n)] = bf16_to_f32(f32_to_bf16(static_cast<float>(acc)));
        }
    return out;
}

void check_split(bool stacked, int64_t T, int64_t K, const std::vector<int64_t>& widths) {
    CudaBackend be(0, DType::BF16);
    be.set_stack_split(stacked);
    int64_t N = 0;
    for (int64_t w : widths) N += w;
    const std::vector<float> xs = test::rand_bf16(static_cast<size_t>(T * K), static_cast<uint32_t>(T + K));
    const std::vector<float> ws = test::rand_bf16(static_cast<size_t>(N * K), static_cast<uint32_t>(N + 3));
    Tensor x = test::put(be, xs, DType::BF16, {T, K});
    Tensor w = test::put(be, ws, DType::BF16, {N, K});
    std::vector<Tensor> ys;
    for (int64_t n : widths) ys.push_back(be.scratch(DType::BF16, {T, n}));
    be.matmul_split(x, w, ys.data(), ys.size());
    const std::vector<float> want = host_matmul(xs, ws, T, K, N);  // [T, N]
    int64_t c0 = 0;
    for (size_t p = 0; p < widths.size(); ++p) {
        const int64_t n = widths[p];
        std::vector<float> part(static_cast<size_t>(T * n));
        for (int64_t t = 0; t < T; ++t)
            for (int64_t c = 0; c < n; ++c)
                part[static_cast<size_t>(t * n + c)] = want[static_cast<size_t>(t * N + c0 + c)];
        // fp32 accumulation of K products of magnitude <= 1, then bf16 output rounding (2^-8 relative) on
        // both sides: a few output ulps.
        test::expect_close(test::get(be, ys[p]), part, 1e-3 * std::sqrt(static_cast<double>(K)), 1.0 / 64,
                           (stacked ? "stacked" : "per part") + std::string(" T=") + std::to_string(T) + " part " +
                               std::to_string(p));
        c0 += n;
    }
}

TEST(CudaDenseSplit, VectorWidthsMatchHost) {
    GRIMOIRE_REQUIRE_GPU();
    // DeltaNet-like q | k | v, z, b, a at a reduced K: every width a multiple of 8 bf16 (16 bytes).
    for (int64_t T : {9, 64, 515}) {
        check_split(true, T, 192, {640, 384, 48, 48});
        check_split(false, T, 192, {640, 384, 48, 48});
    }
}

TEST(CudaDenseSplit, OddWidthsMatchHost) {
    GRIMOIRE_REQUIRE_GPU();
    for (int64_t T : {17, 130}) {
        check_split(true, T, 96, {100, 36, 12});
        check_split(false, T, 96, {100, 36, 12});
    }
}

}  // namespace
}  // namespace grimoire
