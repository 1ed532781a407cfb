// generate(): stopping (EOS ids, extra stop ids, min_tokens, max_tokens, full context, cancellation), reuse
// of a state across calls, seeded determinism, and the logits handed to the callback. Runs the tiny Llama
// fixture on the CPU backend; expected tokens come from transformers
// (tests/fixtures/llama/reference.safetensors).
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/backend.h"
#include "engine/generate.h"
#include "model/model.h"
#include "test_models_util.h"

namespace grimoire {
namespace {

class Generate : public ::testing::Test {
  protected:
    void SetUp() override {
        be = make_cpu_backend();
        model = load_model(test::model_fixture("llama"), *be);
        greedy.sampling.temperature = 0.0f;
        greedy.ignore_eos = true;
    }
    // Runs generate and collects the tokens.
    GenerateStats run(SequenceState& st,
                      std::span<const int32_t> prompt,
                      const GenerateOptions& o,
                      std::vector<int32_t>& out,
                      int64_t cancel_after = -1) {
        return generate(*model, st, prompt, o, [&](int32_t id, std::span<const float> logits) {
            EXPECT_EQ(static_cast<int64_t>(logits.size()), ref.vocab);
            out.push_back(id);
            return cancel_after < 0 || static_cast<int64_t>(out.size()) < cancel_after;
        });
    }
    std::unique_ptr<Backend> be;
    std::unique_ptr<Model> model;
    test::Reference ref{"llama"};
    GenerateOptions greedy;
};

TEST_F(Generate, MaxTokensEndsWithLength) {
    auto st = model->new_state(64);
    greedy.max_tokens = 5;
    std::vector<int32_t> got;
    const GenerateStats s = run(*st, ref.prompts[0], greedy, got);
    EXPECT_EQ(got, std::vector<int32_t>(ref.greedy.begin(), ref.greedy.begin() + 5));
    EXPECT_EQ(s.finish_reason, "length");
    EXPECT_EQ(s.generated_tokens, 5);
    // The last sampled token is not run through the model: prompt + 4.
    EXPECT_EQ(st->n_past, static_cast<int64_t>(ref.prompts[0].size()) + 4);
}

TEST_F(Generate, StopIdEndsWithStopAndIsReported) {
    auto st = model->new_state(64);
    greedy.extra_stop_ids = {ref.greedy[3]};
    std::vector<int32_t> got;
    const GenerateStats s = run(*st, ref.prompts[0], greedy, got);
    const auto first = std::find(ref.greedy.begin(), ref.greedy.end(), ref.greedy[3]) - ref.greedy.begin();
    EXPECT_EQ(got, std::vector<int32_t>(ref.greedy.begin(), ref.greedy.begin() + first + 1));
    EXPECT_EQ(s.finish_reason, "stop");
}

TEST_F(Generate, ModelEosStopsUnlessIgnored) {
    // Make the model's first greedy token an EOS id by asking for it as extra stop, then compare with the
    // model's own EOS list: ids 2 and 3 (config + generation_config) stop only when ignore_eos is false.
    const auto& eos = model->info().eos_token_ids;
    ASSERT_EQ(eos, (std::vector<int32_t>{2, 3}));
    greedy.ignore_eos = false;
    greedy.max_tokens = 16;
    auto st = model->new_state(64);
    std::vector<int32_t> got;
    const GenerateStats s = run(*st, ref.prompts[0], greedy, got);
    const auto hit =
        std::find_if(ref.greedy.begin(), ref.greedy.end(), [](int32_t t) { return t == 2 || t == 3; });
    EXPECT_EQ(got, std::vector<int32_t>(ref.greedy.begin(), hit == ref.greedy.end() ? hit : hit + 1));
    EXPECT_EQ(s.finish_reason, hit == ref.greedy.end() ? "length" : "stop");
}

TEST_F(Generate, MinTokensMasksStopIds) {
    // With the first greedy token declared a stop id and min_tokens 1, the first token must be the runner-up
    // of transformers' logits at the end of the prompt.
    const int64_t V = ref.vocab;
    const float* last = ref.logits[0].data() + (ref.positions[0].size() - 1) * static_cast<size_t>(V);
    int32_t second = -1;
    for (int32_t i = 0; i < V; ++i)
        if (i != ref.greedy[0] && (second < 0 || last[i] > last[second])) second = i;
    greedy.extra_stop_ids = {ref.greedy[0]};
    greedy.min_tokens = 1;
    greedy.max_tokens = 1;
    auto st = model->new_state(64);
    std::vector<int32_t> got;
    run(*st, ref.prompts[0], greedy, got);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0], second);
}

TEST_F(Generate, CallbackCancels) {
    auto st = model->new_state(64);
    std::vector<int32_t> got;
    const GenerateStats s = run(*st, ref.prompts[0], greedy, got, /*cancel_after=*/3);
    EXPECT_EQ(got.size(), 3u);
    EXPECT_EQ(s.finish_reason, "cancelled");
}

TEST_F(Generate, FullContextEndsWithLength) {
    const int64_t n = static_cast<int64_t>(ref.prompts[0].size());
    auto st = model->new_state(n + 3);
    std::vector<int32_t> got;
    const GenerateStats s = run(*st, ref.prompts[0], greedy, got);
    EXPECT_EQ(got.size(), 4u);  // 3 more positions, and the token sampled from the last one
    EXPECT_EQ(s.finish_reason, "length");
    EXPECT_EQ(got, std::vector<int32_t>(ref.greedy.begin(), ref.greedy.begin() + 4));
}

TEST_F(Generate, StateReuseContinuesWithoutRerunning) {
    auto st = model->new_state(64);
    greedy.max_tokens = 8;
    std::vector<int32_t> first, second;
    run(*st, ref.prompts[0], greedy, first);
    std::vector<int32_t> prompt = ref.prompts[0];
    prompt.insert(prompt.end(), first.begin(), first.end());
    const GenerateStats s = run(*st, prompt, greedy, second);
    EXPECT_EQ(s.prompt_tokens, 1);  // only the last token of the first call was new
    first.insert(first.end(), second.begin(), second.end());
    EXPECT_EQ(first, ref.greedy);
}

TEST_F(Generate, PromptMustExtendState) {
    auto st = model->new_state(64);
    greedy.max_tokens = 1;
    std::vector<int32_t> got;
    run(*st, ref.prompts[0], greedy, got);
    const std::vector<int32_t> shorter(ref.prompts[0].begin(), ref.prompts[0].begin() + 3);
    EXPECT_THROW(run(*st, shorter, greedy, got), Error);
    auto small = model->new_state(4);
    EXPECT_THROW(run(*small, ref.prompts[0], greedy, got), Error);
}

TEST_F(Generate, ChunkedPrefillGivesSameTokens) {
    greedy.max_tokens = 16;
    greedy.prefill_chunk = 5;
    auto st = model->new_state(64);
    std::vector<int32_t> got;
    const GenerateStats s = run(*st, ref.prompts[0], greedy, got);
    EXPECT_EQ(got, ref.greedy);
    EXPECT_EQ(s.prompt_tokens, static_cast<int64_t>(ref.prompts[0].size()));
}

// Without logits for the callback a greedy request takes Model::forward_greedy (the backend's argmax): the
// transformers tokens, an empty span, and min_tokens still masking the stop ids first (host path until then).
TEST_F(Generate, GreedyWithoutLogitsTakesTheArgmaxPath) {
    for (int64_t chunk : {int64_t{512}, int64_t{5}}) {
        GenerateOptions o = greedy;
        o.want_logits = false;
        o.max_tokens = 16;
        o.prefill_chunk = chunk;
        auto st = model->new_state(64);
        std::vector<int32_t> got;
        generate(*model, *st, ref.prompts[0], o, [&](int32_t id, std::span<const float> logits) {
            EXPECT_TRUE(logits.empty());
            got.push_back(id);
            return true;
        });
        EXPECT_EQ(got, ref.greedy) << "prefill chunk " << chunk;
    }
    GenerateOptions o = greedy;
    o.want_logits = false;
    o.ignore_eos = false;
    o.max_tokens = 16;
    o.min_tokens = 4;
    o.extra_stop_ids = {ref.greedy[1]};
    auto st = model->new_state(64);
    std::vector<int32_t> got;
    std::vector<size_t> sizes;
    const GenerateStats s = generate(*model, *st, ref.prompts[0], o, [&](int32_t id, std::span<const float> logits) {
        sizes.push_back(logits.size());
        got.push_back(id);
        return true;
    });
    ASSERT_GE(got.size(), 4u);
    for (size_t i = 0; i < got.size(); ++i) {
        if (i < 4) {
            EXPECT_NE(got[i], ref.greedy[1]) << "stop id masked before min_tokens, token " << i;
            EXPECT_EQ(sizes[i], static_cast<size_t>(ref.vocab)) << "host path before min_tokens, token " << i;
        } else {
            EXPECT_EQ(sizes[i], 0u) << "argmax path after min_tokens, token " << i;
        }
    }
    if (s.finish_reason == "stop") {
        EXPECT_EQ(got.back(), ref.greedy[1]);
    }
}

TEST_F(Generate, SeededSamplingIsDeterministicAndSeesRawLogits) {
    GenerateOptions o;
    o.max_tokens = 12;
    o.ignore_eos = true;
    o.sampling.temperature = 1.5f;
    o.sampling.seed = 42;
    o.sampling.has_seed = true;
    std::vector<std::vector<int32_t>> runs;
    for (int r = 0; r < 2; ++r) {
        auto st = model->new_state(64);
        std::vector<int32_t> got;
        bool first = true;
        generate(*model, *st, ref.prompts[0], o, [&](int32_t id, std::span<const float> logits) {
            if (first) {  // raw logits, untouched by temperature: transformers' last-position row
                const float* want = ref.logits[0].data() + (ref.positions[0].size() - 1) * ref.vocab;
                test::expect_logits_near(logits.data(), want, ref.vocab, "callback logits");
                first = false;
            }
            got.push_back(id);
            return true;
        });
        runs.push_back(got);
    }
    EXPECT_EQ(runs[0], runs[1]);
    EXPECT_EQ(runs[0].size(), 12u);
    EXPECT_NE(runs[0], ref.greedy);  // at temperature 1.5 over 12 steps, not all argmax (fixed seed)
}

}  // namespace
}  // namespace grimoire
