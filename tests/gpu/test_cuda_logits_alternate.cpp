// One- and four-row steps with every row's logits copied back, alternating, as a speculative decode with
// logprobs runs its plain and verify steps, with the logits in vocabulary chunks as the 27B's vocabulary
// takes them (GRIMOIRE_LOGIT_CHUNKS=4, set here before the first forward reads it; hence a test binary of its
// own). Each step's logits equal those of the same step on a backend with graphs off, bit for bit (same
// kernels, same order). The 27B bench crashed or hung in this pattern with graphs on (docs/BENCHMARKS.md,
// session 31), and final_logits alone does not (test_cuda_graph_segments ChunkedLogitsAlternatingStepSizes),
// so this runs the whole forward of a fixture model.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../test_util.h"
#include "backend/cuda/step_graph.h"
#include "gpu_test_util.h"
#include "kernels/cuda/kernels.h"
#include "model/model.h"

namespace grimoire {
namespace {

// The fixture model twice, on a backend with graphs and on one without, with a state each; the logits in 4
// vocabulary chunks (the environment is read at the first forward).
struct Pair {
    CudaBackend with_graphs{0, DType::BF16}, direct{0, DType::BF16};
    std::unique_ptr<Model> mg, md;
    std::unique_ptr<SequenceState> sg, sd;
    Pair() {
        setenv("GRIMOIRE_LOGIT_CHUNKS", "4", 1);
        direct.set_graphs(false);
        // Every replay is checked against a fresh capture of its ops: a key that leaves out a launch
        // parameter (a pointer, a size, a host buffer) shows as a difference
        // (graph_stats().check_mismatches).
        with_graphs.set_graph_check(true);
        // GRIMOIRE_ALT_FIXTURE: another checkpoint directory (a quantized copy of qwen3_5 written by
        // tools/quantize.py, to run the qmm kernels' workspaces through the same history).
        const char* other = std::getenv("GRIMOIRE_ALT_FIXTURE");
        const std::string dir = other ? std::string(other) : test::fixtures_dir() + "/qwen3_5";
        mg = load_model(dir, with_graphs), md = load_model(dir, direct);
        sg = mg->new_state(256), sd = md->new_state(256);
    }
};

TEST(CudaLogitsAlternate, OneAndFourRowStepsWithChunkedLogits) {
    GRIMOIRE_REQUIRE_GPU();
    Pair p;
    auto &mg = p.mg, &md = p.md;
    auto &sg = p.sg, &sd = p.sd;
    const std::vector<int32_t> prompt = {1, 5, 9, 13, 17, 21, 25, 29};
    std::vector<float> lg, ld;
    mg->forward(*sg, prompt, 1, lg);
    md->forward(*sd, prompt, 1, ld);
    ASSERT_EQ(lg.size(), ld.size());
    for (int round = 0; round < 16; ++round) {
        const int64_t T = round % 2 == 0 ? 1 : 4;
        std::vector<int32_t> toks(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t)
            toks[static_cast<size_t>(t)] = static_cast<int32_t>(3 + 7 * round + t);
        sg->n_past = sd->n_past =
            static_cast<int64_t>(prompt.size());  // the same context every round, as the bench
        mg->forward(*sg, toks, T, lg);
        md->forward(*sd, toks, T, ld);
        ASSERT_EQ(lg.size(), ld.size()) << "round " << round;
        EXPECT_EQ(0, std::memcmp(lg.data(), ld.data(), lg.size() * sizeof(float)))
            << "round " << round << ", " << T << " rows: logits differ between graphs on and off";
    }
    EXPECT_GT(p.with_graphs.graph_stats().replays, 0);
    EXPECT_GT(p.with_graphs.graph_stats().checked, 0);
    EXPECT_EQ(p.with_graphs.graph_stats().check_mismatches, 0)
        << "a replayed graph differed from its step's ops";
}

// The bench's whole history before the crash, in its order: plain steps greedy and with host logits, then
// blocks of one- and four-row steps greedy, those alternated, blocks with host logits, and last the
// host-logits alternation (where the 27B crashed). Greedy ids and logits compared against graphs off at every
// step.
TEST(CudaLogitsAlternate, TheBenchSequence) {
    GRIMOIRE_REQUIRE_GPU();
    Pair p;
    auto &mg = p.mg, &md = p.md;
    auto &sg = p.sg, &sd = p.sd;
    const int64_t ctx = 16;  // every step at this context, as the bench sets n_past = 512
    int step = 0;
    auto run = [&](int64_t T, bool greedy) {
        std::vector<int32_t> toks(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t)
            toks[static_cast<size_t>(t)] = static_cast<int32_t>(2 + (5 * step + t) % 50);
        sg->n_past = sd->n_past = ctx;
        if (greedy) {
            std::vector<int32_t> ig, id;
            mg->forward_greedy(*sg, toks, T, ig);
            md->forward_greedy(*sd, toks, T, id);
            EXPECT_EQ(ig, id) << "step " << step << ", " << T << " rows greedy";
        } else {
            std::vector<float> lg, ld;
            mg->forward(*sg, toks, T, lg);
            md->forward(*sd, toks, T, ld);
            ASSERT_EQ(lg.size(), ld.size());
            EXPECT_EQ(0, std::memcmp(lg.data(), ld.data(), lg.size() * sizeof(float)))
                << "step " << step << ", " << T << " rows with logits";
        }
        ++step;
    };
    for (const bool greedy : {true, false})
        for (int i = 0; i < 8; ++i) run(1, greedy);
    for (const bool greedy : {true, false}) {
        for (int i = 0; i < 6; ++i) run(1, greedy);
        for (int i = 0; i < 6; ++i) run(4, greedy);
        for (int i = 0; i < 8; ++i) run(1, greedy), run(4, greedy);
    }
    EXPECT_GT(p.with_graphs.graph_stats().replays, 0);
    EXPECT_GT(p.with_graphs.graph_stats().checked, 0);
    EXPECT_EQ(p.with_graphs.graph_stats().check_mismatches, 0)
        << "a replayed graph differed from its step's ops";
}

// A graph's device-to-host copy stays bound to the page-locked buffer it was captured with, so host_staging()
// regrown (the old buffer freed, a larger one allocated, often at the same address, so the same keys) must
// drop the cached graphs. The 27B bench's one-row host-logits step, replayed after a four-row step had grown
// the buffer, crashed inside cuGraphLaunch or with an unspecified launch failure (session 33).
TEST(CudaLogitsAlternate, StagingRegrowthDropsTheGraphsThatCopyIntoIt) {
    GRIMOIRE_REQUIRE_GPU();
    CudaBackend be(0, DType::BF16);
    const int64_t small = 128 * 1024, big = 4 * small;  // f32 elements: 0.5 MB and 2 MB, as the 27B's logits
    int step_no = 0;
    auto step = [&](int64_t n) {
        std::vector<float> in(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
            in[static_cast<size_t>(i)] = static_cast<float>(step_no * 1000003 + i);
        be.reset_scratch();
        Tensor t = be.scratch(DType::F32, {n});
        be.from_host(t, in.data());
        auto* raw = static_cast<float*>(be.host_staging(static_cast<size_t>(n) * 4));
        be.wait_host(be.to_host_async(t, raw));
        EXPECT_EQ(0, std::memcmp(raw, in.data(), static_cast<size_t>(n) * 4)) << "step " << step_no;
        ++step_no;
    };
    // The first step grows the buffer from nothing (its copy then records in a segment of its own); the next three
    // run directly, are captured and are replayed.
    for (int i = 0; i < 4; ++i) step(small);
    EXPECT_GT(be.graph_stats().replays, 0);
    for (int i = 0; i < 3; ++i) step(big);  // the buffer grows at the first
    const int64_t replays = be.graph_stats().replays;
    step(small);  // the same ops as the first three, the staging maybe at the same address: not a replay
    EXPECT_EQ(be.graph_stats().replays, replays)
        << "a graph made before the staging buffer was regrown was replayed";
    for (int i = 0; i < 3; ++i) step(i % 2 ? big : small);
}

// The check itself: ops recorded under a key that leaves out what changes (here on purpose) replay a stale
// graph; with the check on, the replay that differs from its ops is found, counted and run from the fresh
// capture.
TEST(CudaGraphCheck, FindsAKeyThatLeavesOutALaunchParameter) {
    GRIMOIRE_REQUIRE_GPU();
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    int* buf = nullptr;  // [2] i32 filled by a memset node
    float* f = nullptr;  // [64] f32 filled by a kernel
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&buf), 2 * sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&f), 64 * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemset(buf, 0, 2 * sizeof(int)), cudaSuccess);
    std::vector<float> first(64), last(64), want(64);
    {
        cuda::StepGraph g(s);
        g.set_check(true);
        // Step 0 runs directly, step 1 is captured, steps 2-3 replay. From step 2 on the fill's pointer and
        // the kernel's seed change, and the key (1, 2) says nothing of either.
        for (int step = 0; step < 4; ++step) {
            int* dst = buf + (step >= 2 ? 1 : 0);
            const uint64_t seed = step >= 2 ? 99 : 7;
            g.record(
                1, [dst](cudaStream_t st) { cudaMemsetAsync(dst, 7, sizeof(int), st); }, "fill");
            g.record(
                2, [f, seed](cudaStream_t st) { cuda::random_fill(f, DType::F32, 64, seed, 1.0f, 0.0f, st); },
                "random");
            g.flush();
            ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
            if (step == 1)
                ASSERT_EQ(cudaMemcpy(first.data(), f, 64 * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        }
        ASSERT_EQ(cudaMemcpy(last.data(), f, 64 * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(g.stats().captures, 1);
        EXPECT_EQ(g.stats().checked, 2);
        EXPECT_EQ(g.stats().check_mismatches, 1);  // step 2; step 3 matches the capture that replaced it
    }
    int h[2] = {0, 0};
    ASSERT_EQ(cudaMemcpy(h, buf, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(h[0], 0x07070707);
    EXPECT_EQ(h[1], 0x07070707) << "the replay after the mismatch must run the new pointer";
    cuda::random_fill(f, DType::F32, 64, 99, 1.0f, 0.0f, s);
    ASSERT_EQ(cudaMemcpy(want.data(), f, 64 * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(last, want) << "the replay after the mismatch must run the new seed";
    EXPECT_NE(first, want);
    cudaFree(buf);
    cudaFree(f);
    cudaStreamDestroy(s);
}

}  // namespace
}  // namespace grimoire
