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
#include "gpu_test_util.h"
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
}

}  // namespace
}  // namespace grimoire
