// Bad checkpoints are refused with errors that name what is wrong: the directory, config key and value, or
// file and tensor (with expected vs found shapes). Each case edits a copy of a good fixture.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "model/model.h"
#include "test_models_util.h"

namespace grimoire {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class BadCheckpoint : public ::testing::Test {
  protected:
    void SetUp() override {
        dir = fs::temp_directory_path() / ("grimoire_models_" + std::to_string(::getpid()) + "_" +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir);
        be = make_cpu_backend();
    }
    void TearDown() override { fs::remove_all(dir); }

    // Copies fixture `name` into `dir` and applies `edit` to its config.json.
    void copy_fixture(const std::string& name, const std::function<void(json&)>& edit = nullptr) {
        fs::copy(test::model_fixture(name), dir, fs::copy_options::recursive);
        if (!edit) return;
        json cfg;
        {
            std::ifstream f(dir / "config.json");
            f >> cfg;
        }
        edit(cfg);
        std::ofstream(dir / "config.json") << cfg.dump(2);
    }
    // The message of the Error load_model throws (fails the test when it does not throw).
    std::string load_error() {
        try {
            load_model(dir.string(), *be);
        } catch (const Error& e) {
            return e.what();
        }
        ADD_FAILURE() << "load_model accepted a bad checkpoint";
        return "";
    }

    fs::path dir;
    std::unique_ptr<Backend> be;
};

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

TEST_F(BadCheckpoint, MissingDirectory) {
    const std::string m = load_error();
    EXPECT_HAS(m, dir.string());
    EXPECT_HAS(m, "not found");
}

TEST_F(BadCheckpoint, MissingConfig) {
    copy_fixture("llama");
    fs::remove(dir / "config.json");
    EXPECT_HAS(load_error(), "config.json");
}

TEST_F(BadCheckpoint, ConfigNotJson) {
    copy_fixture("llama");
    std::ofstream(dir / "config.json") << "{\"architectures\": [";
    const std::string m = load_error();
    EXPECT_HAS(m, "config.json");
    EXPECT_HAS(m, "not valid JSON");
}

TEST_F(BadCheckpoint, UnknownArchitecture) {
    copy_fixture("llama", [](json& c) { c["architectures"] = {"FooForCausalLM"}; });
    const std::string m = load_error();
    EXPECT_HAS(m, "architectures[0]");
    EXPECT_HAS(m, "FooForCausalLM");
    EXPECT_HAS(m, "LlamaForCausalLM");  // lists what is known
}

TEST_F(BadCheckpoint, QwenMoeNotSupportedYet) {
    copy_fixture("qwen3", [](json& c) { c["architectures"] = {"Qwen3MoeForCausalLM"}; });
    const std::string m = load_error();
    EXPECT_HAS(m, "Qwen3MoeForCausalLM");
    EXPECT_HAS(m, "not supported yet");
}

TEST_F(BadCheckpoint, UnsupportedActivation) {
    copy_fixture("llama", [](json& c) { c["hidden_act"] = "gelu"; });
    const std::string m = load_error();
    EXPECT_HAS(m, "hidden_act");
    EXPECT_HAS(m, "\"gelu\" is not supported");
}

TEST_F(BadCheckpoint, UnsupportedRopeScaling) {
    copy_fixture("llama3_tied", [](json& c) { c["rope_scaling"]["rope_type"] = "dynamic"; });
    EXPECT_HAS(load_error(), "dynamic");
}

TEST_F(BadCheckpoint, SlidingWindowRefused) {
    copy_fixture("qwen2", [](json& c) { c["use_sliding_window"] = true; });
    EXPECT_HAS(load_error(), "use_sliding_window");
}

TEST_F(BadCheckpoint, WrongTypeNamesKey) {
    copy_fixture("qwen3", [](json& c) { c["hidden_size"] = "64"; });
    const std::string m = load_error();
    EXPECT_HAS(m, "hidden_size");
    EXPECT_HAS(m, "not an integer");
}

TEST_F(BadCheckpoint, MissingTensorNamed) {
    copy_fixture("llama", [](json& c) { c["num_hidden_layers"] = 3; });
    const std::string m = load_error();
    EXPECT_HAS(m, "model.layers.2.input_layernorm.weight");
    EXPECT_HAS(m, "not found");
}

TEST_F(BadCheckpoint, WrongShapeNamesExpectedAndFound) {
    copy_fixture("qwen2", [](json& c) { c["intermediate_size"] = 96; });
    const std::string m = load_error();
    EXPECT_HAS(m, "model.layers.0.mlp.gate_proj");
    EXPECT_HAS(m, "expected [out, in] = [96, 64]");
    EXPECT_HAS(m, "found [128, 64]");
}

TEST_F(BadCheckpoint, WrongNormShapeNamesFile) {
    copy_fixture("qwen3", [](json& c) {
        c["head_dim"] = 16;
        c["num_attention_heads"] = 8;
        c["num_key_value_heads"] = 4;
    });
    const std::string m = load_error();
    EXPECT_HAS(m, "model.safetensors");
    EXPECT_HAS(m, "q_norm.weight");
    EXPECT_HAS(m, "expected shape [16], found [32]");
}

TEST_F(BadCheckpoint, UnexpectedBiasRefused) {
    // Qwen2 weights (with q/k/v biases) under a Llama config without attention_bias.
    copy_fixture("qwen2", [](json& c) { c["architectures"] = {"LlamaForCausalLM"}; });
    const std::string m = load_error();
    EXPECT_HAS(m, "q_proj.bias");
    EXPECT_HAS(m, "takes no bias");
}

TEST_F(BadCheckpoint, MissingBiasRefused) {
    copy_fixture("llama", [](json& c) { c["attention_bias"] = true; });
    const std::string m = load_error();
    EXPECT_HAS(m, "model.layers.0.self_attn.q_proj.bias");
    EXPECT_HAS(m, "not found");
}

TEST_F(BadCheckpoint, TruncatedTensorFileNamed) {
    copy_fixture("llama");
    fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") - 100);
    EXPECT_HAS(load_error(), "model.safetensors");
}

TEST_F(BadCheckpoint, BadEosType) {
    copy_fixture("llama", [](json& c) { c["eos_token_id"] = "two"; });
    EXPECT_HAS(load_error(), "eos_token_id");
}

TEST(ModelsTied, LmHeadAbsentMeansTied) {
    // llama3_tied stores no lm_head.weight: the embedding is used, and logits match (test_models.cpp); here
    // the untied llama fixture with tie_word_embeddings forced on must load too (and ignore lm_head.weight).
    auto be = make_cpu_backend();
    const fs::path dir = fs::temp_directory_path() / ("grimoire_models_tie_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::copy(test::model_fixture("llama"), dir, fs::copy_options::recursive);
    json cfg;
    std::ifstream(dir / "config.json") >> cfg;
    cfg["tie_word_embeddings"] = true;
    std::ofstream(dir / "config.json") << cfg.dump();
    auto m = load_model(dir.string(), *be);
    // embed_tokens counted once; lm_head.weight (512 x 64) not loaded.
    Checkpoint ck(dir.string());
    EXPECT_EQ(m->info().n_params, [&] {
        int64_t n = 0;
        for (const auto& [k, t] : ck.all()) n += t->numel();
        return n - 512 * 64;
    }());
    fs::remove_all(dir);
}

}  // namespace
}  // namespace grimoire
