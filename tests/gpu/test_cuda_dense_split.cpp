// CudaBackend::matmul_split (a stacked plain-weight projection group over several tokens): each part [T, n_i]
// equals x [T, K] times its rows of the stacked weight, computed on the host in fp64 from the same bf16 values,
// whether the backend runs one GEMM + split_cols (16-byte vector path when every width is a multiple of 8
// bf16, the scalar path otherwise) or a GEMM per part (set_stack_split(false)).
//
// The fused prompt cores (gdn_core, gated_attention_core) read a deferred split's parts in place from the
// stacked GEMM's output: their results must equal those on split-out parts (the split materialised by a sync
// point first), bit for bit (the same kernels read the same values), and no split_cols may run.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend/rope_params.h"
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

// Runs `core` on the parts of a stacked GEMM twice: parts deferred (read in place) and parts materialised by
// synchronize(). Returns the profile reports of the two runs (to see which one ran split_cols).
std::vector<std::string> twice(CudaBackend& be, const Tensor& x, const Tensor& w, const std::vector<int64_t>& widths,
                               const std::function<void(std::vector<Tensor>&, int)>& core) {
    std::vector<std::string> reports;
    for (int run = 0; run < 2; ++run) {
        std::vector<Tensor> ys;
        for (int64_t n : widths) ys.push_back(be.scratch(DType::BF16, {x.rows(), n}));
        be.set_profiling(true);
        be.matmul_split(x, w, ys.data(), ys.size());
        if (run == 1) be.synchronize();
        core(ys, run);
        be.synchronize();
        reports.push_back(be.profile_report());
        be.set_profiling(false);
    }
    return reports;
}

TEST(CudaDenseSplit, GdnCoreReadsStackedPartsInPlace) {
    GRIMOIRE_REQUIRE_GPU();
    const int64_t Hk = 2, Hv = 6, dk = 128, dv = 128, T = 130, K = 96, Kc = 4;
    const int64_t C = 2 * Hk * dk + Hv * dv;
    const std::vector<int64_t> widths = {C, Hv * dv, Hv, Hv};  // qkv | z | b | a
    CudaBackend be(0, DType::BF16);
    int64_t N = 0;
    for (int64_t n : widths) N += n;
    Tensor x = test::put(be, test::rand_bf16(static_cast<size_t>(T * K), 1), DType::BF16, {T, K});
    Tensor w = test::put(be, test::rand_bf16(static_cast<size_t>(N * K), 2, -0.2f, 0.2f), DType::BF16, {N, K});
    Tensor cw = test::put(be, test::rand_bf16(static_cast<size_t>(C * Kc), 3), DType::F32, {C, Kc});
    Tensor Al = test::put(be, test::rand_bf16(static_cast<size_t>(Hv), 4), DType::F32, {Hv});
    Tensor dtb = test::put(be, test::rand_bf16(static_cast<size_t>(Hv), 5), DType::F32, {Hv});
    Tensor nw = test::put(be, test::rand_bf16(static_cast<size_t>(dv), 6, 0.5f, 1.5f), DType::F32, {dv});
    Tensor cs[2], st[2], out[2];
    for (int r = 0; r < 2; ++r) {
        cs[r] = be.alloc_persistent(DType::BF16, {Kc - 1, C});
        st[r] = be.alloc_persistent(DType::F32, {Hv, dk, dv});
        out[r] = be.alloc_persistent(DType::BF16, {T, Hv * dv});
    }
    const auto rep = twice(be, x, w, widths, [&](std::vector<Tensor>& ys, int r) {
        be.gdn_core(ys[0], cw, cs[r], ys[3], ys[2], Al, dtb, st[r], ys[1], nw, 1e-6f, Hk, out[r]);
    });
    EXPECT_EQ(rep[0].find("split_cols"), std::string::npos) << rep[0];
    EXPECT_NE(rep[1].find("split_cols"), std::string::npos) << rep[1];
    test::expect_close(test::get(be, out[0]), test::get(be, out[1]), 0, 0, "gdn_core output");
    test::expect_close(test::get(be, st[0]), test::get(be, st[1]), 0, 0, "gdn_core state");
    test::expect_close(test::get(be, cs[0]), test::get(be, cs[1]), 0, 0, "gdn_core conv state");
}

TEST(CudaDenseSplit, GatedAttentionCoreReadsStackedPartsInPlace) {
    GRIMOIRE_REQUIRE_GPU();
    const int64_t Hq = 4, Hkv = 2, D = 64, T = 40, K = 96, n_past = 5, max_ctx = 64;
    const std::vector<int64_t> widths = {Hq * 2 * D, Hkv * D, Hkv * D};  // q|gate | k | v
    CudaBackend be(0, DType::BF16);
    int64_t N = 0;
    for (int64_t n : widths) N += n;
    Tensor x = test::put(be, test::rand_bf16(static_cast<size_t>(T * K), 11), DType::BF16, {T, K});
    Tensor w = test::put(be, test::rand_bf16(static_cast<size_t>(N * K), 12, -0.3f, 0.3f), DType::BF16, {N, K});
    Tensor qn = test::put(be, test::rand_bf16(static_cast<size_t>(D), 13, -0.5f, 0.5f), DType::F32, {D});
    Tensor kn = test::put(be, test::rand_bf16(static_cast<size_t>(D), 14, -0.5f, 0.5f), DType::F32, {D});
    std::vector<int32_t> pos(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(n_past + t);
    Tensor pg = be.upload_raw(pos.data(), DType::I32, {T});
    RopeParams rp;
    rp.rot_dim = 16;
    for (int i = 0; i < rp.rot_dim / 2; ++i) rp.inv_freq.push_back(std::pow(10000.0f, -2.0f * static_cast<float>(i) / 16.0f));
    const auto cache0 = test::rand_bf16(static_cast<size_t>(max_ctx * Hkv * D), 15);
    Tensor kc[2], vc[2], out[2];
    for (int r = 0; r < 2; ++r) {
        kc[r] = test::put(be, cache0, DType::BF16, {max_ctx, Hkv, D});
        vc[r] = test::put(be, cache0, DType::BF16, {max_ctx, Hkv, D});
        out[r] = be.alloc_persistent(DType::BF16, {T, Hq * D});
    }
    const auto rep = twice(be, x, w, widths, [&](std::vector<Tensor>& ys, int r) {
        be.gated_attention_core(ys[0], ys[1], ys[2], qn, kn, 1e-6f, pg, rp, kc[r], vc[r], n_past, 0.125f, out[r]);
    });
    EXPECT_EQ(rep[0].find("split_cols"), std::string::npos) << rep[0];
    EXPECT_NE(rep[1].find("split_cols"), std::string::npos) << rep[1];
    test::expect_close(test::get(be, out[0]), test::get(be, out[1]), 0, 0, "gated_attention_core output");
    test::expect_close(test::get(be, kc[0]), test::get(be, kc[1]), 0, 0, "k cache");
    test::expect_close(test::get(be, vc[0]), test::get(be, vc[1]), 0, 0, "v cache");
}

}  // namespace
}  // namespace grimoire
