// The bundled demo model (models/demo, trained by tools/train_demo/) on the CPU backend against transformers:
// tests/fixtures/demo/reference.safetensors, made by tools/train_demo/make_demo_fixture.py from the committed
// checkpoint (fp32 compute on the stored BF16 weights). Checks the tokenizer and chat template on the fixture's
// texts, logits of three prompts (a sentence, a ChatML conversation, a 150-token held-out paragraph crossing the
// 64-token DeltaNet chunks), 24 greedy tokens, and that every tensor including the MTP head is loaded.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "model/hybrid_layers.h"
#include "model/model.h"
#include "../test_util.h"
#include "test_models_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace grimoire {
namespace {

std::string demo_dir() { return test::source_dir() + "/models/demo"; }

// The texts the fixture's prompts were made from, and the greedy run's margin (metadata of the fixture).
std::map<std::string, std::string> fixture_metadata() {
    return SafetensorsFile(test::model_fixture("demo") + "/reference.safetensors").metadata();
}

class DemoModel : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        be_ = make_cpu_backend().release();
        model_ = load_model(demo_dir(), *be_).release();
    }
    static void TearDownTestSuite() {
        delete model_;
        delete be_;
    }
    static Backend* be_;
    static Model* model_;
    const test::Reference ref_{"demo"};  // prompt_i, positions_i, logits_i, greedy (test_models_util.h)
    const std::map<std::string, std::string> meta_ = fixture_metadata();
};
Backend* DemoModel::be_ = nullptr;
Model* DemoModel::model_ = nullptr;

TEST_F(DemoModel, LoadsEveryTensorWithTheMtpHead) {
    const ModelInfo& info = model_->info();
    EXPECT_EQ(info.architecture, "Qwen3_5ForConditionalGeneration");
    EXPECT_EQ(info.vocab_size, 8192);
    EXPECT_EQ(info.hidden_size, 256);
    EXPECT_EQ(info.num_layers, 8);
    const Checkpoint ckpt(demo_dir());
    int64_t want = 0;
    for (const auto& [name, t] : ckpt.all()) want += t->numel();
    EXPECT_EQ(want, 12810928);  // the count TRAINING.md reports, MTP head included
    EXPECT_EQ(info.n_params, want);
    const MtpWeights* mtp = hybrid_mtp_weights(*model_);
    ASSERT_NE(mtp, nullptr);
    EXPECT_EQ(mtp->layers.size(), 1u);
    EXPECT_EQ(mtp->fc->in_features(), 512);
}

TEST_F(DemoModel, TokenizerAndChatTemplateMatchTransformers) {
    auto tok = Tokenizer::load(demo_dir());
    EXPECT_EQ(tok->vocab_size(), 8192);
    EXPECT_EQ(tok->token_to_id("<|endoftext|>"), 8185);
    EXPECT_EQ(tok->token_to_id("<|im_end|>"), 8187);
    EXPECT_EQ(tok->token_to_id("</tool_call>"), 8191);
    ASSERT_EQ(ref_.prompts.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        const std::string& text = meta_.at("text_" + std::to_string(i));
        EXPECT_EQ(tok->encode(text), ref_.prompts[i]) << "text_" << i;
        EXPECT_EQ(tok->decode(ref_.prompts[i]), text) << "text_" << i;
    }
    // text_1 is the chat template of the fixture script rendered by transformers.
    const ChatTemplate tmpl(tok->chat_template());
    nlohmann::ordered_json ctx;
    ctx["messages"] = nlohmann::ordered_json::array(
        {{{"role", "system"}, {"content", "You are a storyteller."}},
         {{"role", "user"}, {"content", "Tell me about the old house by the river."}}});
    ctx["add_generation_prompt"] = true;
    EXPECT_EQ(tmpl.render(ctx), meta_.at("text_1"));
}

TEST_F(DemoModel, LogitsMatchTransformers) {
    const int64_t V = model_->info().vocab_size;
    ASSERT_EQ(ref_.vocab, V);
    for (size_t i = 0; i < ref_.prompts.size(); ++i) {
        const auto& prompt = ref_.prompts[i];
        const auto n = static_cast<int64_t>(prompt.size());
        auto st = model_->new_state(256);
        std::vector<float> got;
        model_->forward(*st, prompt, n, got);
        ASSERT_EQ(static_cast<int64_t>(got.size()), n * V);
        for (size_t r = 0; r < ref_.positions[i].size(); ++r) {
            const int32_t pos = ref_.positions[i][r];
            test::expect_logits_near(&got[pos * V], &ref_.logits[i][r * V], V,
                                     "prompt " + std::to_string(i) + " position " + std::to_string(pos));
        }
    }
}

TEST_F(DemoModel, GreedyTokensMatchTransformers) {
    const int64_t V = model_->info().vocab_size;
    const auto& want = ref_.greedy;
    auto st = model_->new_state(256);
    std::vector<float> logits;
    model_->forward(*st, ref_.prompts[0], 1, logits);
    std::vector<int32_t> got;
    for (size_t i = 0; i < want.size(); ++i) {
        got.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) - logits.begin()));
        const int32_t next = got.back();
        model_->forward(*st, std::span<const int32_t>(&next, 1), 1, logits);
    }
    EXPECT_EQ(got, want) << "smallest top-1/top-2 gap in the reference run: " << meta_.at("greedy_min_margin");
}

}  // namespace
}  // namespace grimoire
