// make_rope_params against transformers' ROPE_INIT_FUNCTIONS (fixture from tools/make_rope_fixture.py),
// and its refusals of unsupported rope types.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "backend/rope_params.h"
#include "../test_util.h"

namespace grimoire {
namespace {

using nlohmann::json;

TEST(RopeParams, MatchesTransformers) {
    std::ifstream f(test::fixtures_dir() + "/rope/rope_cases.json");
    ASSERT_TRUE(f) << "missing tests/fixtures/rope/rope_cases.json";
    const json fx = json::parse(f);
    ASSERT_GE(fx["cases"].size(), 7u);
    for (const json& c : fx["cases"]) {
        const std::string name = c["name"];
        ConfigReader cfg(c["config"], name + "/config.json");
        const RopeParams p = make_rope_params(cfg, c["head_dim"].get<int64_t>());
        const auto& want = c["inv_freq"];
        ASSERT_EQ(p.inv_freq.size(), want.size()) << name;
        EXPECT_EQ(p.rot_dim, static_cast<int>(2 * want.size())) << name;
        EXPECT_TRUE(p.neox) << name;
        for (size_t i = 0; i < want.size(); ++i) {
            const double w = want[i].get<double>();
            // transformers computes theta^(2i/d) in fp32: allow a few fp32 ulps.
            EXPECT_NEAR(p.inv_freq[i], w, 4e-7 * std::fabs(w) + 1e-12) << name << " i=" << i;
        }
        EXPECT_NEAR(p.attn_factor, c["attention_factor"].get<double>(), 1e-6) << name;
    }
}

TEST(RopeParams, ExplicitPartialFactorOverridesConfig) {
    ConfigReader cfg(json{{"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}}, "config.json");
    EXPECT_EQ(make_rope_params(cfg, 128).rot_dim, 64);
    EXPECT_EQ(make_rope_params(cfg, 128, 1.0f).rot_dim, 128);
    const RopeParams p = make_rope_params(cfg, 128, 0.25f);
    ASSERT_EQ(p.inv_freq.size(), 16u);
    EXPECT_NEAR(p.inv_freq[1], std::pow(10000.0, -2.0 / 32.0), 1e-7);
}

std::string error_of(const json& j, int64_t head_dim = 64) {
    try {
        make_rope_params(ConfigReader(j, "model/config.json"), head_dim);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(RopeParams, RefusesUnsupportedTypesNamingKeyAndValue) {
    EXPECT_EQ(error_of({{"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}}),
              "model/config.json: rope_scaling.type: \"dynamic\" is not supported (supported rope types: default, "
              "linear, llama3, yarn)");
    const std::string e = error_of({{"rope_parameters", {{"rope_type", "longrope"}, {"rope_theta", 1e4}}}});
    EXPECT_NE(e.find("model/config.json: rope_parameters.rope_type: \"longrope\" is not supported"), std::string::npos) << e;
}

TEST(RopeParams, MissingFieldsAreNamed) {
    EXPECT_EQ(error_of({{"rope_scaling", {{"rope_type", "linear"}}}}),
              "model/config.json: rope_scaling.factor: is required but missing");
    const std::string e = error_of({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}});
    EXPECT_NE(e.find("rope_scaling.low_freq_factor"), std::string::npos) << e;
    const std::string y = error_of({{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}}}});
    EXPECT_NE(y.find("rope_parameters.original_max_position_embeddings"), std::string::npos) << y;
    const std::string t = error_of({{"rope_theta", "big"}});
    EXPECT_NE(t.find("rope_theta: \"big\" is not a number"), std::string::npos) << t;
    const std::string d = error_of({{"partial_rotary_factor", 0.3}}, 64);
    EXPECT_NE(d.find("invalid rotary dim"), std::string::npos) << d;
}

}  // namespace
}  // namespace grimoire
