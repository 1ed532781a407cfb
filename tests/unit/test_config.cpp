// ConfigReader: typed reads with errors that name the file, the full key path and the value.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "io/config.h"

namespace grimoire {
namespace {

using nlohmann::json;

template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

const json kCfg = json::parse(R"({
  "hidden_size": 1024, "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "model_type": "qwen3",
  "layer_types": ["full_attention", "linear_attention"], "vocab_size": -5, "big": 4294967296, "nothing": null,
  "text_config": {"num_heads": 16, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}
})");

TEST(Config, TypedReads) {
    ConfigReader c(kCfg, "cfg/config.json");
    EXPECT_EQ(c.get<int64_t>("hidden_size"), 1024);
    EXPECT_EQ(c.get<int>("hidden_size"), 1024);
    EXPECT_FLOAT_EQ(c.get<float>("rms_norm_eps"), 1e-6f);
    EXPECT_DOUBLE_EQ(c.get<double>("hidden_size"), 1024.0);  // integers are numbers
    EXPECT_TRUE(c.get<bool>("tie_word_embeddings"));
    EXPECT_EQ(c.get<std::string>("model_type"), "qwen3");
    EXPECT_EQ(c.get<std::vector<std::string>>("layer_types")[1], "linear_attention");
    EXPECT_EQ(c.get_or<int>("missing", 7), 7);
    EXPECT_EQ(c.get_or<int>("nothing", 9), 9);  // null counts as absent
    EXPECT_FALSE(c.has("nothing"));
    EXPECT_EQ(c.get<int64_t>("big"), int64_t{1} << 32);
    EXPECT_EQ(c.sub("text_config").get<int>("num_heads"), 16);
    EXPECT_FALSE(c.opt_sub("vision_config").has_value());
}

TEST(Config, ErrorsNameFileKeyPathAndValue) {
    ConfigReader c(kCfg, "cfg/config.json");
    EXPECT_EQ(error_of([&] { c.get<int>("num_layers"); }), "cfg/config.json: num_layers: is required but missing");
    EXPECT_EQ(error_of([&] { c.get<int>("rms_norm_eps"); }), "cfg/config.json: rms_norm_eps: 1e-06 is not an integer");
    EXPECT_EQ(error_of([&] { c.get<std::string>("hidden_size"); }), "cfg/config.json: hidden_size: 1024 is not a string");
    EXPECT_EQ(error_of([&] { c.get<bool>("hidden_size"); }), "cfg/config.json: hidden_size: 1024 is not a boolean");
    EXPECT_EQ(error_of([&] { c.get<float>("model_type"); }), "cfg/config.json: model_type: \"qwen3\" is not a number");
    EXPECT_EQ(error_of([&] { c.get<std::vector<int>>("layer_types"); }),
              "cfg/config.json: layer_types: [\"full_attention\",\"linear_attention\"] has the wrong type");
    EXPECT_EQ(error_of([&] { c.sub("model_type"); }), "cfg/config.json: model_type: is not an object");
    const ConfigReader rp = c.sub("text_config").sub("rope_parameters");
    EXPECT_EQ(error_of([&] { rp.unsupported("rope_type", "use yarn"); }),
              "cfg/config.json: text_config.rope_parameters.rope_type: \"dynamic\" is not supported (use yarn)");
    EXPECT_EQ(error_of([&] { rp.get<int>("factor"); }), "cfg/config.json: text_config.rope_parameters.factor: 2.0 is not an integer");
}

TEST(Config, IntegersOutOfRangeAreRefused) {
    ConfigReader c(kCfg, "cfg/config.json");
    EXPECT_EQ(error_of([&] { c.get<uint32_t>("vocab_size"); }), "cfg/config.json: vocab_size: -5 is out of range");
    EXPECT_EQ(error_of([&] { c.get<size_t>("vocab_size"); }), "cfg/config.json: vocab_size: -5 is out of range");
    EXPECT_EQ(error_of([&] { c.get<int32_t>("big"); }), "cfg/config.json: big: 4294967296 is out of range");
    EXPECT_EQ(c.get<int>("vocab_size"), -5);
}

TEST(Config, FromFile) {
    const auto dir = std::filesystem::temp_directory_path() / ("grimoire_cfg_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string good = (dir / "config.json").string(), bad = (dir / "bad.json").string();
    std::ofstream(good) << R"({"a": {"b": 3}})";
    std::ofstream(bad) << R"({"a": )";
    EXPECT_EQ(ConfigReader::from_file(good).sub("a").get<int>("b"), 3);
    EXPECT_EQ(ConfigReader::from_file(good).file(), good);
    EXPECT_NE(error_of([&] { ConfigReader::from_file(bad); }).find(bad + ": not valid JSON"), std::string::npos);
    EXPECT_EQ(error_of([&] { ConfigReader::from_file((dir / "none.json").string()); }),
              (dir / "none.json").string() + ": cannot open");
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace grimoire
