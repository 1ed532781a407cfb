// Our readers against the reference packers' own output: tests/fixtures/quant_ref/ holds small layers packed by
// the public libraries themselves (tools/make_reference_pack_fixtures.py, pinned versions, committed because CI
// has no torch) with the libraries' own dequantization. load_linear must decode those bytes to exactly the
// library's values: bit for bit against its f32 dequant (the exact (q - z) * scale), and, rounded to bf16 / f16,
// bit for bit against its native bf16 (compressed-tensors) or f16 (auto-round) output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../test_util.h"
#include "backend/backend.h"
#include "core/dtype.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "quant/linear.h"

namespace grimoire {
namespace {

class QuantReference : public ::testing::TestWithParam<std::string> {};

// The scale of each element [N, K]: compressed-tensors stores weight_scale [N, G], GPTQ/AWQ packings scales
// [G, N]; groups are equal here.
std::vector<float> element_scales(const Checkpoint& ckpt, int64_t N, int64_t K) {
    const TensorInfo* ct = ckpt.find("layer.proj.weight_scale");
    const TensorInfo& t = ct ? *ct : ckpt.get("layer.proj.scales");
    const std::vector<float> s = t.to_f32();
    const int64_t G = ct ? t.shape[1] : t.shape[0];
    std::vector<float> out(static_cast<size_t>(N * K));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
            const int64_t g = k * G / K;
            out[static_cast<size_t>(n * K + k)] = s[static_cast<size_t>(ct ? n * G + g : g * N + n)];
        }
    return out;
}

TEST_P(QuantReference, DequantEqualsTheLibrarysOwn) {
    const std::string dir = test::fixtures_dir() + "/quant_ref/" + GetParam();
    auto be = make_cpu_backend();
    Checkpoint ckpt(dir);
    const QuantConfig qc = QuantConfig::from_config(ConfigReader::from_file(dir + "/config.json"));
    SafetensorsFile ref(dir + "/reference.safetensors");
    const auto& rt = ref.tensors();
    const TensorInfo& orig = rt.at("weight");  // [N, K] bf16, before quantization

    auto lin = load_linear(*be, ckpt, "layer.proj", qc);
    EXPECT_NE(lin->format(), "BF16");
    const int64_t N = lin->out_features(), K = lin->in_features();
    ASSERT_EQ(orig.shape, (std::vector<int64_t>{N, K}));
    const std::vector<float> w = lin->dequantize();
    ASSERT_EQ(w.size(), static_cast<size_t>(N * K));

    // The library's dequant at each precision it was stored in: f32 [N, K] (exact), bf16 / f16 [N, K] (its
    // native output: the exact product rounded once to nearest even).
    int compared = 0;
    if (auto it = rt.find("dequant_f32"); it != rt.end()) {
        ASSERT_EQ(it->second.numel(), N * K);
        const std::vector<float> want = it->second.to_f32();
        size_t bad = 0;
        for (size_t i = 0; i < w.size(); ++i) bad += std::memcmp(&w[i], &want[i], 4) != 0;
        EXPECT_EQ(bad, 0u) << GetParam() << " f32 (" << lin->format() << ")";
        ++compared;
    }
    for (const char* name : {"dequant_bf16", "dequant_f16"}) {
        auto it = rt.find(name);
        if (it == rt.end()) continue;
        ASSERT_EQ(it->second.numel(), N * K);
        const bool bf = it->second.dtype == DType::BF16;
        ASSERT_TRUE(bf || it->second.dtype == DType::F16) << name;
        std::vector<uint16_t> want(static_cast<size_t>(N * K));  // copied: the mapping may be misaligned
        std::memcpy(want.data(), it->second.data, want.size() * 2);
        size_t bad = 0;
        for (size_t i = 0; i < w.size(); ++i) bad += (bf ? f32_to_bf16(w[i]) : f32_to_f16(w[i])) != want[i];
        EXPECT_EQ(bad, 0u) << GetParam() << " " << name << " (" << lin->format() << ")";
        ++compared;
    }
    EXPECT_GE(compared, 1) << "reference.safetensors holds no dequant";

    // The fixture is a quantization of the weight it says it started from: every element within one step of
    // its group's scale (RTN error is half a step; a clamped zero point can add up to half a step more).
    const std::vector<float> w0 = orig.to_f32(), scale = element_scales(ckpt, N, K);
    for (size_t i = 0; i < w.size(); ++i)
        ASSERT_LE(std::fabs(w[i] - w0[i]), scale[i] * 1.0001f) << GetParam() << " n " << i / K << " k " << i % K;
}

INSTANTIATE_TEST_SUITE_P(CompressedTensors, QuantReference,
                         ::testing::Values("ct_sym_g128", "ct_asym_g128", "ct_asym_g64", "ct_asym_chan"));
INSTANTIATE_TEST_SUITE_P(AutoRound, QuantReference,
                         ::testing::Values("ar_gptq_asym_g128", "ar_gptq_sym_g64", "ar_awq_asym_g64",
                                           "ar_awq_sym_g128"));

}  // namespace
}  // namespace grimoire
