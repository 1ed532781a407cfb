// End to end: the tiny Qwen3 fixture quantized by tools/quantize.py to GPTQ (asym, act-order, g32), AutoRound
// AWQ packing (asym, g32), compressed-tensors W4A16 (g32, sym and asym) and FP8 128x128 blocks loads through
// load_model and runs on the CPU. Its logits match transformers' fp32 forward over the DEQUANTIZED weights (the
// reference in each fixture) to the same 1e-4 tolerance as the unquantized models (test_models_util.h), and stay
// near the BF16 model's: the distance to the BF16 logits is the quantization error, measured at fixture creation
// (max |diff| 2.0 / 2.2 / 2.5 / 1.0 of max|logit| 5.7 for random weights at 4 bits; 3.8 for qwen3_ct_asym over
// all reference positions), so only a loose bound.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "model/model.h"
#include "test_models_util.h"

namespace grimoire {
namespace {

class QuantModel : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantModel, LogitsMatchTransformersOnDequantizedWeights) {
    const std::string dir = test::fixtures_dir() + "/quant/" + GetParam();
    auto be = make_cpu_backend();
    auto model = load_model(dir, *be);
    // What `inspect`, `run` and `serve` report: every projection of the layers (q, k, v, o, gate, up, down) in the
    // quantized format, the untied lm_head left BF16 by the quantizer.
    const ModelInfo& info = model->info();
    int64_t quantized = 0;
    for (const auto& [fmt, n] : info.linear_formats)
        if (fmt != "BF16") quantized += n;
    EXPECT_EQ(quantized, 7 * info.num_layers) << linear_formats_summary(info);
    EXPECT_EQ(info.linear_formats.size(), 2u) << linear_formats_summary(info);
    EXPECT_EQ(info.linear_formats.count("BF16") ? info.linear_formats.at("BF16") : 0, 1) << linear_formats_summary(info);
    EXPECT_EQ(linear_formats_summary(info).rfind(std::to_string(7 * info.num_layers) + " ", 0), 0u)
        << linear_formats_summary(info);
    SafetensorsFile ref(dir + "/reference.safetensors");
    SafetensorsFile bf16(test::model_fixture("qwen3") + "/reference.safetensors");
    for (int p = 0; ref.tensors().count("prompt_" + std::to_string(p)); ++p) {
        const std::string s = std::to_string(p);
        const TensorInfo& pi = ref.tensors().at("prompt_" + s);
        const TensorInfo& pos = ref.tensors().at("positions_" + s);
        std::vector<int32_t> ids(static_cast<size_t>(pi.numel())), rows(static_cast<size_t>(pos.numel()));
        std::memcpy(ids.data(), pi.data, pi.nbytes);
        std::memcpy(rows.data(), pos.data, pos.nbytes);
        const std::vector<float> want = ref.tensors().at("logits_" + s).to_f32();
        const std::vector<float> base = bf16.tensors().at("logits_" + s).to_f32();
        const int64_t V = ref.tensors().at("logits_" + s).shape[1];
        auto st = model->new_state(static_cast<int64_t>(ids.size()));
        std::vector<float> logits;
        model->forward(*st, ids, static_cast<int64_t>(ids.size()), logits);
        for (size_t r = 0; r < rows.size(); ++r) {
            const float* got = logits.data() + rows[r] * V;
            test::expect_logits_near(got, want.data() + r * V, V, GetParam() + " prompt " + s);
            // Loose: within the measured quantization error (<= 2.5) with margin, far from unrelated logits.
            float maxdiff = 0;
            for (int64_t v = 0; v < V; ++v) maxdiff = std::max(maxdiff, std::fabs(got[v] - base[r * V + v]));
            EXPECT_LT(maxdiff, 4.0f) << GetParam() << " vs BF16 logits, prompt " << s;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantModel, ::testing::Values("qwen3_gptq", "qwen3_awq", "qwen3_ct", "qwen3_ct_asym",
                                                                   "qwen3_fp8"));

}  // namespace
}  // namespace grimoire
