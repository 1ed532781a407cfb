// Helpers for the model tests: the fixtures under tests/fixtures/{llama,llama3_tied,qwen2,qwen3}/ made by
// tools/make_fixtures.py, and their reference.safetensors (prompts, transformers' fp32 logits, greedy
// tokens).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../test_util.h"
#include "io/safetensors.h"

namespace grimoire::test {

inline std::string model_fixture(const std::string& name) {
    return fixtures_dir() + "/" + name;
}

struct Reference {
    std::vector<std::vector<int32_t>> prompts;    // prompt_i
    std::vector<std::vector<int32_t>> positions;  // positions_i: rows of logits_i
    std::vector<std::vector<float>> logits;       // logits_i [P, V]
    std::vector<int32_t> greedy;                  // 16 greedy tokens after prompts[0]
    int64_t vocab = 0;

    explicit Reference(const std::string& fixture) {
        SafetensorsFile f(model_fixture(fixture) + "/reference.safetensors");
        auto ints = [&](const std::string& n) {
            const TensorInfo& t = f.tensors().at(n);
            std::vector<int32_t> v(static_cast<size_t>(t.numel()));
            std::memcpy(v.data(), t.data, t.nbytes);
            return v;
        };
        for (int i = 0; f.tensors().count("prompt_" + std::to_string(i)); ++i) {
            const std::string s = std::to_string(i);
            prompts.push_back(ints("prompt_" + s));
            positions.push_back(ints("positions_" + s));
            const TensorInfo& l = f.tensors().at("logits_" + s);
            vocab = l.shape[1];
            logits.push_back(l.to_f32());
        }
        greedy = ints("greedy");
    }
};

// The tolerance for fp32 compute against transformers' fp32 forward: both use the same (bf16-exact or f32)
// weights and differ only in summation order, so the error is a few ulps of the largest intermediate sums,
// ~1e-6 relative for these sizes (K <= 128, 2 layers). 1e-4 * max|logit| + 1e-4 leaves a 100x margin and is
// still far below what any real bug (a wrong bias, norm, RoPE pair or head mapping) does: O(0.1..1).
inline void expect_logits_near(const float* got, const float* want, int64_t n, const std::string& what) {
    float maxref = 0, maxdiff = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; ++i) maxref = std::max(maxref, std::fabs(want[i]));
    for (int64_t i = 0; i < n; ++i) {
        const float d = std::fabs(got[i] - want[i]);
        if (!(d <= maxdiff)) {
            maxdiff = d;
            worst = i;
        }
    }
    const float tol = 1e-4f * maxref + 1e-4f;
    if (std::getenv("GRIMOIRE_PRINT_DIFF"))  // to see the actual margin: GRIMOIRE_PRINT_DIFF=1 ./test_models
        std::printf("%s: max|diff| %.3g, tolerance %.3g\n", what.c_str(), maxdiff, tol);
    EXPECT_LE(maxdiff, tol) << what << ": max |diff| " << maxdiff << " at " << worst << " (got " << got[worst]
                            << ", want " << want[worst] << "), max|logit| " << maxref;
}

}  // namespace grimoire::test
