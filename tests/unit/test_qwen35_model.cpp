// Qwen3.5 / Qwen3-Next hybrid models on the CPU backend against transformers (tests/fixtures/qwen3_5*/,
// qwen3_next/, made by tools/make_qwen35_fixtures.py): logits for prompts of 1, 5, 70 and 130 tokens, 64 greedy
// tokens, decode token-by-token vs prefill, the MTP head kept, every tensor loaded, MoE checkpoints refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "model/hybrid_layers.h"
#include "model/model.h"
#include "../test_util.h"

namespace grimoire {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return test::fixtures_dir() + "/" + name; }

// reference.safetensors of one fixture.
struct Ref {
    SafetensorsFile file;
    explicit Ref(const std::string& name) : file(fixture(name) + "/reference.safetensors") {}
    bool has(const std::string& n) const { return file.tensors().count(n) > 0; }
    std::vector<int32_t> ids(const std::string& n) const {
        const TensorInfo& t = file.tensors().at(n);
        std::vector<int32_t> v(static_cast<size_t>(t.numel()));
        std::memcpy(v.data(), t.data, t.nbytes);
        return v;
    }
    std::vector<float> f32(const std::string& n) const { return file.tensors().at(n).to_f32(); }
    int64_t rows(const std::string& n) const { return file.tensors().at(n).shape[0]; }
    double margin() const { return std::stod(file.metadata().at("greedy_min_margin")); }
};

// fp32 against transformers' fp32 with the same (bf16-exact) weights: only summation order differs (and the
// chunked-vs-recurrent DeltaNet algebra), amplified by six random layers and a 130-step state. Measured: at most
// 1.0e-4 absolute at max|logit| 4.7 (2e-5 relative). 2e-4 * max|logit| + 2e-4 (~1.1e-3 here) keeps a 10x margin,
// stays 4x under the smallest greedy top-1/top-2 gap (4.6e-3), and any real bug (a (1+w) norm read as w, a
// swapped gate half, a wrong head group or conv tap) moves logits by O(0.1..1).
void expect_close(const float* got, const float* want, int64_t n, const std::string& what) {
    double maxref = 0, maxdiff = 0;
    for (int64_t i = 0; i < n; ++i) {
        maxref = std::max(maxref, std::abs(double(want[i])));
        maxdiff = std::max(maxdiff, std::abs(double(got[i]) - double(want[i])));
    }
    EXPECT_LE(maxdiff, 2e-4 * maxref + 2e-4) << what << ": max |diff| " << maxdiff << ", max |logit| " << maxref;
}

int32_t argmax(const float* x, int64_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

class Qwen35Fixture : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        be_ = make_cpu_backend();
        model_ = load_model(fixture(GetParam()), *be_);
    }
    std::unique_ptr<Backend> be_;
    std::unique_ptr<Model> model_;
};

TEST_P(Qwen35Fixture, PrefillLogitsMatchTransformers) {
    const Ref ref(GetParam());
    const int64_t V = model_->info().vocab_size;
    for (int n : {1, 5, 70, 130}) {
        const std::string s = std::to_string(n);
        const auto prompt = ref.ids("prompt_" + s);
        const auto want = ref.f32("logits_" + s);
        const int64_t rows = ref.rows("logits_" + s);
        auto st = model_->new_state(256);
        std::vector<float> got;
        model_->forward(*st, prompt, rows, got);
        ASSERT_EQ(got.size(), want.size());
        expect_close(got.data(), want.data(), rows * V, GetParam() + " prompt of " + s);
    }
}

TEST_P(Qwen35Fixture, GreedyTokensMatchTransformers) {
    const Ref ref(GetParam());
    const int64_t V = model_->info().vocab_size;
    const auto want = ref.ids("greedy_tokens");
    const bool have_logits = ref.has("greedy_logits");
    const auto want_logits = have_logits ? ref.f32("greedy_logits") : std::vector<float>{};
    auto st = model_->new_state(256);
    std::vector<float> logits;
    model_->forward(*st, ref.ids("greedy_prompt"), 1, logits);
    std::vector<int32_t> got;
    for (size_t i = 0; i < want.size(); ++i) {
        if (have_logits) expect_close(logits.data(), &want_logits[i * V], V, "decode step " + std::to_string(i));
        got.push_back(argmax(logits.data(), V));
        const int32_t next = got.back();
        model_->forward(*st, std::span<const int32_t>(&next, 1), 1, logits);
    }
    EXPECT_EQ(got, want) << "smallest top-1/top-2 gap in the reference run: " << ref.margin();
}

TEST_P(Qwen35Fixture, DecodeTokenByTokenEqualsPrefill) {
    // The 130-token prompt as one prefill, as 70 + 60 (the state crosses a call boundary mid-chunk), and one
    // token at a time (recurrent DeltaNet steps, one-row attention); all last-row logits agree.
    const Ref ref(GetParam());
    const int64_t V = model_->info().vocab_size;
    const auto prompt = ref.ids("prompt_130");
    auto st = model_->new_state(256);
    std::vector<float> full, split, step;
    model_->forward(*st, prompt, 130, full);

    st->reset();
    model_->forward(*st, std::span<const int32_t>(prompt).first(70), 0, split);
    model_->forward(*st, std::span<const int32_t>(prompt).subspan(70), 60, split);
    expect_close(split.data(), &full[70 * V], 60 * V, "70 + 60 split prefill");

    st->reset();
    for (size_t t = 0; t < prompt.size(); ++t) {
        model_->forward(*st, std::span<const int32_t>(&prompt[t], 1), 1, step);
        if (t % 13 == 0 || t + 1 == prompt.size())
            expect_close(step.data(), &full[t * V], V, "token-by-token at position " + std::to_string(t));
    }
    EXPECT_EQ(st->n_past, 130);
}

TEST_P(Qwen35Fixture, EveryTextTensorIsLoaded) {
    // n_params counts what the loader uploaded: all tensors but the vision tower (mtp.* included).
    const Checkpoint ckpt(fixture(GetParam()));
    int64_t want = 0;
    for (const auto& [name, t] : ckpt.all())
        if (name.rfind("model.visual.", 0) != 0) want += t->numel();
    EXPECT_EQ(model_->info().n_params, want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen35Fixture, ::testing::Values("qwen3_5", "qwen3_5_causal", "qwen3_next"));

TEST(Qwen35Model, MtpHeadIsKept) {
    auto be = make_cpu_backend();
    auto m = load_model(fixture("qwen3_5"), *be);
    const MtpWeights* mtp = hybrid_mtp_weights(*m);
    ASSERT_NE(mtp, nullptr);
    ASSERT_EQ(mtp->layers.size(), 1u);
    EXPECT_EQ(mtp->fc->in_features(), 2 * m->info().hidden_size);
    EXPECT_EQ(mtp->fc->out_features(), m->info().hidden_size);
    EXPECT_EQ(mtp->layers[0].attn.qkv.width(0), 2 * 4 * 32);  // [query | gate] per head
    auto st = m->new_state(16);
    EXPECT_EQ(st->extra_layers.size(), 1u);  // the MTP layer's own KV cache
    // The text-only fixture has no MTP tensors.
    auto causal = load_model(fixture("qwen3_5_causal"), *be);
    EXPECT_EQ(hybrid_mtp_weights(*causal), nullptr);
}

// A copy of a fixture directory (tensors linked) with config.json edited by `edit`.
std::string edited_fixture(const std::string& name, const std::string& tag,
                           const std::function<void(nlohmann::json&)>& edit) {
    const fs::path dir = fs::temp_directory_path() / ("grimoire_qwen35_" + tag + "_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(fixture(name) + "/config.json"));
    edit(cfg);
    std::ofstream(dir / "config.json") << cfg.dump(2);
    fs::remove(dir / "model.safetensors");
    fs::create_symlink(fs::absolute(fixture(name) + "/model.safetensors"), dir / "model.safetensors");
    return dir.string();
}

std::string load_error(const std::string& dir) {
    auto be = make_cpu_backend();
    try {
        load_model(dir, *be);
    } catch (const Error& e) {
        fs::remove_all(dir);
        return e.what();
    }
    fs::remove_all(dir);
    return "";
}

TEST(Qwen35Model, MoeCheckpointsAreRefusedByName) {
    std::string e = load_error(edited_fixture("qwen3_5", "moe_arch", [](nlohmann::json& c) {
        c["architectures"] = {"Qwen3_5MoeForConditionalGeneration"};
        c["model_type"] = "qwen3_5_moe";
    }));
    EXPECT_NE(e.find("Qwen3_5MoeForConditionalGeneration"), std::string::npos) << e;
    EXPECT_NE(e.find("not supported yet"), std::string::npos) << e;

    e = load_error(edited_fixture("qwen3_5", "moe_key", [](nlohmann::json& c) {
        c["text_config"]["num_experts"] = 8;
    }));
    EXPECT_NE(e.find("text_config.num_experts"), std::string::npos) << e;
    EXPECT_NE(e.find("not supported yet"), std::string::npos) << e;

    e = load_error(edited_fixture("qwen3_next", "moe_next", [](nlohmann::json& c) { c["num_experts"] = 8; }));
    EXPECT_NE(e.find("num_experts"), std::string::npos) << e;
    EXPECT_NE(e.find("not supported yet"), std::string::npos) << e;

    // Every layer listed in mlp_only_layers is dense, so that Qwen3-Next config loads despite num_experts.
    EXPECT_EQ(load_error(edited_fixture("qwen3_next", "mlp_only", [](nlohmann::json& c) {
                  c["num_experts"] = 8;
                  c["mlp_only_layers"] = {0, 1, 2, 3};
              })),
              "");
}

TEST(Qwen35Model, BadLinearHeadConfigIsNamed) {
    const std::string e = load_error(edited_fixture("qwen3_5_causal", "bad_heads", [](nlohmann::json& c) {
        c["linear_num_value_heads"] = 3;  // not a multiple of linear_num_key_heads = 2
    }));
    EXPECT_NE(e.find("linear_num_value_heads"), std::string::npos) << e;
}

}  // namespace
}  // namespace grimoire
