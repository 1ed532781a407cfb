// The Llama / Qwen2 / Qwen3 architectures on the CPU backend against Hugging Face transformers: logits of the
// fixtures' prompts (one forward, and the long prompt in uneven chunks through the KV cache) and 16 greedy
// tokens. Tolerance: see expect_logits_near in test_models_util.h.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "engine/generate.h"
#include "model/model.h"
#include "test_models_util.h"

namespace grimoire {
namespace {

using test::Reference;

class FixtureModel : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        be = make_cpu_backend();
        model = load_model(test::model_fixture(GetParam()), *be);
    }
    std::unique_ptr<Backend> be;
    std::unique_ptr<Model> model;
    Reference ref{GetParam()};
};

TEST_P(FixtureModel, InfoFromConfigAndCheckpoint) {
    const ModelInfo& i = model->info();
    EXPECT_EQ(i.vocab_size, ref.vocab);
    EXPECT_EQ(i.num_layers, 2);
    EXPECT_EQ(i.hidden_size, 64);
    EXPECT_EQ(i.bos_token_id, 1);
    // config.json says 2, generation_config.json says [2, 3]: merged, in order, without repeats.
    EXPECT_EQ(i.eos_token_ids, (std::vector<int32_t>{2, 3}));
    Checkpoint ckpt(test::model_fixture(GetParam()));
    int64_t stored = 0;
    for (const auto& [name, t] : ckpt.all()) stored += t->numel();
    EXPECT_EQ(i.n_params, stored);  // every stored tensor is used, the tied lm_head is not counted twice
    EXPECT_EQ(i.dtypes.size(), 1u);
}

TEST_P(FixtureModel, LogitsMatchTransformersInOneForward) {
    for (size_t p = 0; p < ref.prompts.size(); ++p) {
        const auto& ids = ref.prompts[p];
        auto st = model->new_state(static_cast<int64_t>(ids.size()));
        std::vector<float> logits;
        model->forward(*st, ids, static_cast<int64_t>(ids.size()), logits);
        EXPECT_EQ(st->n_past, static_cast<int64_t>(ids.size()));
        ASSERT_EQ(logits.size(), ids.size() * static_cast<size_t>(ref.vocab));
        for (size_t r = 0; r < ref.positions[p].size(); ++r) {
            const int32_t pos = ref.positions[p][r];
            test::expect_logits_near(
                logits.data() + pos * ref.vocab, ref.logits[p].data() + r * ref.vocab, ref.vocab,
                GetParam() + " prompt " + std::to_string(p) + " position " + std::to_string(pos));
        }
    }
}

TEST_P(FixtureModel, ChunkedPrefillMatchesThroughTheCache) {
    const auto& ids = ref.prompts[2];  // > 64 tokens
    ASSERT_GT(ids.size(), 65u);
    auto st = model->new_state(static_cast<int64_t>(ids.size()));
    std::vector<float> all(ids.size() * static_cast<size_t>(ref.vocab)), logits;
    const size_t cuts[] = {0, 1, 2, 7, 40, 64, 65, ids.size()};
    for (size_t c = 0; c + 1 < std::size(cuts); ++c) {
        const std::span<const int32_t> part(ids.data() + cuts[c], cuts[c + 1] - cuts[c]);
        model->forward(*st, part, static_cast<int64_t>(part.size()), logits);
        std::copy(logits.begin(), logits.end(),
                  all.begin() + static_cast<std::ptrdiff_t>(cuts[c] * ref.vocab));
    }
    for (size_t r = 0; r < ref.positions[2].size(); ++r) {
        const int32_t pos = ref.positions[2][r];
        test::expect_logits_near(all.data() + pos * ref.vocab, ref.logits[2].data() + r * ref.vocab,
                                 ref.vocab, GetParam() + " chunked, position " + std::to_string(pos));
    }
}

TEST_P(FixtureModel, GreedyTokensMatchTransformers) {
    auto st = model->new_state(64);
    GenerateOptions g;
    g.max_tokens = static_cast<int64_t>(ref.greedy.size());
    g.sampling.temperature = 0.0f;
    g.ignore_eos = true;  // a random model may well emit id 2 or 3
    std::vector<int32_t> got;
    const GenerateStats s = generate(*model, *st, ref.prompts[0], g, [&](int32_t id, std::span<const float>) {
        got.push_back(id);
        return true;
    });
    EXPECT_EQ(got, ref.greedy);
    EXPECT_EQ(s.finish_reason, "length");
    EXPECT_EQ(s.prompt_tokens, static_cast<int64_t>(ref.prompts[0].size()));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureModel, ::testing::Values("llama", "llama3_tied", "qwen2", "qwen3"));

}  // namespace
}  // namespace grimoire
