// A prompt-sized step recorded in segments (CudaBackend::set_prompt_segment_ops: the recorded ops are flushed
// at the first GEMM after n of them) gives the same values as the step launched op by op with graphs off, in
// every phase of the graph cache: first run direct, second captured, later ones replayed. The step is a small
// residual stack (GEMM, add + RMSNorm per layer) over device inputs refilled from the host each time, like a
// forward's token ids. Likewise a one-row step split after its first n ops (set_first_segment_ops: the decode
// step's early flush), with consecutive zero fills on the boundary (they join one launch only while it is
// still recorded). And final_logits' vocabulary chunks (each copied to the host by to_host_async as soon as
// its GEMV is done) give the logits of the single GEMV and copy, bit for bit. And a one-row stack whose
// add_rmsnorm lets the next GEMV launch ahead (Backend::linear_follows, as run_stack does) gives the values
// of the same stack without the hint.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "model/layers.h"
#include "quant/linear.h"

namespace grimoire {
namespace {

struct Stack {
    std::vector<Tensor> w, norm;  // [K, K] BF16, [K] F32 per layer
};

// x0 [T, K] from the host, then per layer: y = x w^T; x += y; h = rmsnorm(x) (h feeds the next GEMM).
std::vector<float> step(CudaBackend& be, const Stack& s, const std::vector<float>& x0, int64_t T, int64_t K) {
    be.reset_scratch();
    std::vector<uint16_t> h16(x0.size());
    for (size_t i = 0; i < x0.size(); ++i) h16[i] = f32_to_bf16(x0[i]);
    Tensor x = be.scratch(DType::BF16, {T, K});
    be.from_host(x, h16.data());
    Tensor h = be.scratch(DType::BF16, {T, K});
    be.rmsnorm(x, s.norm[0], 1e-6f, NormKind::PLAIN, h);
    for (size_t l = 0; l < s.w.size(); ++l) {
        Tensor y = be.scratch(DType::BF16, {T, K});
        be.matmul(h, s.w[l], y);
        be.add_rmsnorm(x, y, s.norm[l], 1e-6f, NormKind::PLAIN, h);
    }
    return test::get(be, h);
}

TEST(CudaGraphSegments, SegmentedStepsMatchDirectLaunches) {
    GRIMOIRE_REQUIRE_GPU();
    const int64_t T = 40, K = 64, L = 7;
    CudaBackend seg(0, DType::BF16), direct(0, DType::BF16);
    direct.set_graphs(false);
    Stack ss, sd;
    for (int64_t l = 0; l < L; ++l) {
        const auto w = test::rand_bf16(static_cast<size_t>(K * K), static_cast<uint32_t>(100 + l), -0.2f, 0.2f);
        const auto n = test::rand_bf16(static_cast<size_t>(K), static_cast<uint32_t>(200 + l), 0.5f, 1.5f);
        ss.w.push_back(test::put(seg, w, DType::BF16, {K, K}));
        sd.w.push_back(test::put(direct, w, DType::BF16, {K, K}));
        ss.norm.push_back(test::put(seg, n, DType::F32, {K}));
        sd.norm.push_back(test::put(direct, n, DType::F32, {K}));
    }
    seg.set_first_segment_ops(0);  // only the prompt rule here
    for (size_t n_ops : {size_t{2}, size_t{5}}) {
        seg.set_prompt_segment_ops(n_ops);
        for (int rep = 0; rep < 4; ++rep) {  // direct, direct (seen once), captured, replayed
            const auto x0 = test::rand_bf16(static_cast<size_t>(T * K), static_cast<uint32_t>(rep + 7 * n_ops), -2, 2);
            test::expect_close(step(seg, ss, x0, T, K), step(direct, sd, x0, T, K), 0, 0,
                               "segments of " + std::to_string(n_ops) + " ops, run " + std::to_string(rep));
        }
    }
    // The segments were captured and replayed as graphs of their own.
    EXPECT_GE(seg.graph_stats().captures, 2);
    EXPECT_GE(seg.graph_stats().replays, 2);
}

// One row (no GEMM, so only the first-segment rule splits it): z1 and z2 are zeroed back to back after z2 was
// filled from the host; a step split right at z1's fill must still zero z2. out = h + z1 + z2.
std::vector<float> row_step(CudaBackend& be, const Stack& s, const std::vector<float>& x0, int64_t K) {
    be.reset_scratch();
    std::vector<uint16_t> h16(x0.size()), ones(static_cast<size_t>(K), f32_to_bf16(1.0f));
    for (size_t i = 0; i < x0.size(); ++i) h16[i] = f32_to_bf16(x0[i]);
    Tensor x = be.scratch(DType::BF16, {1, K});
    be.from_host(x, h16.data());  // op 1
    Tensor z1 = be.scratch(DType::BF16, {1, K}), z2 = be.scratch(DType::BF16, {1, K});
    be.from_host(z2, ones.data());  // op 2
    be.zero(z1);                    // op 3
    be.zero(z2);                    // joins op 3's launch unless that launch was flushed
    Tensor h = be.scratch(DType::BF16, {1, K});
    be.rmsnorm(x, s.norm[0], 1e-6f, NormKind::PLAIN, h);
    for (size_t l = 0; l < s.w.size(); ++l) {
        Tensor y = be.scratch(DType::BF16, {1, K});
        be.matmul(h, s.w[l], y);
        be.add_rmsnorm(x, y, s.norm[l], 1e-6f, NormKind::PLAIN, h);
    }
    Tensor o1 = be.scratch(DType::BF16, {1, K}), o2 = be.scratch(DType::BF16, {1, K});
    be.add(h, z1, o1);
    be.add(o1, z2, o2);
    return test::get(be, o2);
}

TEST(CudaGraphSegments, FirstSegmentOfOneRowStepMatchesDirectLaunches) {
    GRIMOIRE_REQUIRE_GPU();
    const int64_t K = 96, L = 6;
    CudaBackend seg(0, DType::BF16), direct(0, DType::BF16);
    direct.set_graphs(false);
    seg.set_prompt_segment_ops(0);
    Stack ss, sd;
    for (int64_t l = 0; l < L; ++l) {
        const auto w = test::rand_bf16(static_cast<size_t>(K * K), static_cast<uint32_t>(300 + l), -0.2f, 0.2f);
        const auto n = test::rand_bf16(static_cast<size_t>(K), static_cast<uint32_t>(400 + l), 0.5f, 1.5f);
        ss.w.push_back(test::put(seg, w, DType::BF16, {K, K}));
        sd.w.push_back(test::put(direct, w, DType::BF16, {K, K}));
        ss.norm.push_back(test::put(seg, n, DType::F32, {K}));
        sd.norm.push_back(test::put(direct, n, DType::F32, {K}));
    }
    const int64_t captures0 = seg.graph_stats().captures;
    for (size_t n_ops : {size_t{1}, size_t{3}, size_t{7}}) {
        seg.set_first_segment_ops(n_ops);
        for (int rep = 0; rep < 4; ++rep) {  // direct, direct (seen once), captured, replayed
            const auto x0 = test::rand_bf16(static_cast<size_t>(K), static_cast<uint32_t>(rep + 11 * n_ops), -2, 2);
            test::expect_close(row_step(seg, ss, x0, K), row_step(direct, sd, x0, K), 0, 0,
                               "first segment of " + std::to_string(n_ops) + " ops, run " + std::to_string(rep));
        }
    }
    // Each split gave two graphs (the first segment and the rest), captured once each.
    EXPECT_GE(seg.graph_stats().captures - captures0, 6);
}

// One row: per layer y = h w^T; x += y; h = rmsnorm(x), with the launch-ahead hint before each add_rmsnorm
// when `ahead` (the GEMV after it may then start while the GEMV before it still runs).
std::vector<float> ahead_step(
    CudaBackend& be, const Stack& s, const std::vector<float>& x0, int64_t K, bool ahead) {
    be.reset_scratch();
    std::vector<uint16_t> h16(x0.size());
    for (size_t i = 0; i < x0.size(); ++i) h16[i] = f32_to_bf16(x0[i]);
    Tensor x = be.scratch(DType::BF16, {1, K});
    be.from_host(x, h16.data());
    Tensor h = be.scratch(DType::BF16, {1, K});
    be.rmsnorm(x, s.norm[0], 1e-6f, NormKind::PLAIN, h);
    for (size_t l = 0; l < s.w.size(); ++l) {
        Tensor y = be.scratch(DType::BF16, {1, K});
        be.matmul(h, s.w[l], y);
        if (ahead) be.linear_follows();
        be.add_rmsnorm(x, y, s.norm[l], 1e-6f, NormKind::PLAIN, h);
    }
    return test::get(be, h);
}

TEST(CudaGraphSegments, LaunchAheadNormMatchesPlainNorm) {
    GRIMOIRE_REQUIRE_GPU();
    const int64_t K = 2048, L = 12;  // GEMVs of 8 MB: the next one's blocks overlap the previous one's tail
    CudaBackend ahead(0, DType::BF16), plain(0, DType::BF16);
    Stack sa, sp;
    for (int64_t l = 0; l < L; ++l) {
        const auto w =
            test::rand_bf16(static_cast<size_t>(K * K), static_cast<uint32_t>(500 + l), -0.05f, 0.05f);
        const auto n = test::rand_bf16(static_cast<size_t>(K), static_cast<uint32_t>(600 + l), 0.5f, 1.5f);
        sa.w.push_back(test::put(ahead, w, DType::BF16, {K, K}));
        sp.w.push_back(test::put(plain, w, DType::BF16, {K, K}));
        sa.norm.push_back(test::put(ahead, n, DType::F32, {K}));
        sp.norm.push_back(test::put(plain, n, DType::F32, {K}));
    }
    for (int rep = 0; rep < 12; ++rep) {  // direct, direct (seen once), captured, then replayed
        const auto x0 = test::rand_bf16(static_cast<size_t>(K), static_cast<uint32_t>(rep + 900), -2, 2);
        test::expect_close(ahead_step(ahead, sa, x0, K, true), ahead_step(plain, sp, x0, K, false), 0, 0,
                           "launch-ahead norm, run " + std::to_string(rep));
    }
    EXPECT_GE(ahead.graph_stats().replays, 8);
}

TEST(CudaGraphSegments, ChunkedLogitsMatchOneCopy) {
    GRIMOIRE_REQUIRE_GPU();
    const int64_t V = 1000, H = 64;  // V: no chunk a multiple of another's rows
    CudaBackend be(0, DType::BF16);
    const auto w = test::rand_bf16(static_cast<size_t>(V * H), 501, -0.5f, 0.5f);
    const auto nw = test::rand_bf16(static_cast<size_t>(H), 502, 0.5f, 1.5f);
    auto lm = make_dense_linear(test::put(be, w, DType::BF16, {V, H}), Tensor{}, w);
    const Tensor norm = test::put(be, nw, DType::F32, {H});
    for (int64_t T : {int64_t{1}, int64_t{3}}) {
        for (int rep = 0; rep < 4; ++rep) {  // direct, direct (seen once), captured, replayed
            const auto x0 = test::rand_bf16(static_cast<size_t>(T * H), static_cast<uint32_t>(600 + rep + 10 * T), -2, 2);
            std::vector<uint16_t> h16(x0.size());
            for (size_t i = 0; i < x0.size(); ++i) h16[i] = f32_to_bf16(x0[i]);
            std::vector<float> want;
            for (int64_t chunks : {int64_t{1}, int64_t{3}, int64_t{7}}) {
                be.reset_scratch();
                Tensor x = be.scratch(DType::BF16, {T, H});
                be.from_host(x, h16.data());
                std::vector<float> got;
                final_logits(be, x, norm, 1e-6f, NormKind::PLAIN, *lm, T, got, chunks);
                ASSERT_EQ(got.size(), static_cast<size_t>(T * V));
                if (chunks == 1) {
                    want = got;
                    continue;
                }
                test::expect_close(got, want, 0, 0,
                                   std::to_string(chunks) + " chunks, T " + std::to_string(T) + ", run " +
                                       std::to_string(rep));
            }
        }
    }
    EXPECT_GE(be.graph_stats().replays, 6);
}

// The same with the step size alternating, 1 row then 4 rows then 1 ..., as a speculative decode with logits
// runs plain and verify steps: each size's chunked step is replayed from its own cached graph between the
// other's, over one host staging buffer (grown once by the first 4-row step). Logits equal the one-copy ones of
// the same input, bit for bit, every round. (The 27B bench crashed or hung in this pattern at 554ca9f.)
TEST(CudaGraphSegments, ChunkedLogitsAlternatingStepSizes) {
    GRIMOIRE_REQUIRE_GPU();
    const int64_t V = 1000, H = 64;
    CudaBackend be(0, DType::BF16);
    const auto w = test::rand_bf16(static_cast<size_t>(V * H), 511, -0.5f, 0.5f);
    const auto nw = test::rand_bf16(static_cast<size_t>(H), 512, 0.5f, 1.5f);
    auto lm = make_dense_linear(test::put(be, w, DType::BF16, {V, H}), Tensor{}, w);
    const Tensor norm = test::put(be, nw, DType::F32, {H});
    for (int round = 0; round < 12; ++round) {
        const int64_t T = round % 2 == 0 ? 1 : 4;
        const auto x0 = test::rand_bf16(static_cast<size_t>(T * H), static_cast<uint32_t>(700 + round), -2, 2);
        std::vector<uint16_t> h16(x0.size());
        for (size_t i = 0; i < x0.size(); ++i) h16[i] = f32_to_bf16(x0[i]);
        std::vector<float> got[2];
        for (int k = 0; k < 2; ++k) {  // 4 chunks (to_host_async per chunk), then one copy
            be.reset_scratch();
            Tensor x = be.scratch(DType::BF16, {T, H});
            be.from_host(x, h16.data());
            final_logits(be, x, norm, 1e-6f, NormKind::PLAIN, *lm, T, got[k], k == 0 ? 4 : 1);
            ASSERT_EQ(got[k].size(), static_cast<size_t>(T * V));
        }
        test::expect_close(got[0], got[1], 0, 0, "4 chunks, T " + std::to_string(T) + ", round " + std::to_string(round));
    }
    EXPECT_GE(be.graph_stats().replays, 8);
}

}  // namespace
}  // namespace grimoire
