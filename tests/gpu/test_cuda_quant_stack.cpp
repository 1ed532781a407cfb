// Stacked quantized projection groups on the CUDA backend (BF16): the tiny quantized Qwen3 fixtures' q/k/v and
// gate/up groups load as few units, and each part's output equals the matching columns of its unit's own
// [T, N] output: bit-exact for T <= 16 (one qmm launch, then the split_cols kernel copies), and within bf16
// rounding for a prompt (T > 16: one dequant, then one cuBLAS GEMM per row range of the dequantized weight).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../test_util.h"
#include "gpu_test_util.h"
#include "io/config.h"
#include "model/layers.h"

namespace grimoire {
namespace {

struct Group {
    std::vector<std::string> parts;
    std::vector<int64_t> widths;
};

void check_group(CudaBackend& be, const ProjGroup& g, const Group& spec, int64_t K, const std::string& what) {
    for (int64_t T : {1, 4, 16, 40}) {
        be.reset_scratch();
        const std::vector<float> xs = test::rand_bf16(static_cast<size_t>(T * K), static_cast<uint32_t>(T * 7 + K));
        Tensor x = test::put(be, xs, DType::BF16, {T, K});
        const std::vector<Tensor> outs = g.forward(be, x);
        ASSERT_EQ(outs.size(), spec.parts.size()) << what;
        size_t part = 0;
        for (size_t u = 0; u < g.n_units(); ++u) {
            const Linear& lin = g.unit(u);
            const int64_t N = lin.out_features();
            Tensor full = be.scratch(DType::BF16, {T, N});
            lin.forward(be, x, full);
            const std::vector<float> want = test::get(be, full);  // [T, N]
            float mx = 0;
            for (float v : want) mx = std::max(mx, std::fabs(v));
            for (int64_t c0 = 0; c0 < N; c0 += g.width(part), ++part) {
                const int64_t w = g.width(part);
                const std::vector<float> got = test::get(be, outs[part]);  // [T, w]
                ASSERT_EQ(got.size(), static_cast<size_t>(T * w));
                size_t bad = 0;
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t c = 0; c < w; ++c) {
                        const float a = got[static_cast<size_t>(t * w + c)], b = want[static_cast<size_t>(t * N + c0 + c)];
                        bad += T <= 16 ? std::memcmp(&a, &b, 4) != 0 : std::fabs(a - b) > 0.02f * mx;
                    }
                EXPECT_EQ(bad, 0u) << what << " part " << spec.parts[part] << " T=" << T;
            }
        }
        EXPECT_EQ(part, spec.parts.size()) << what;
    }
}

class CudaQuantStack : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaQuantStack, PartsEqualTheirUnitsColumns) {
    GRIMOIRE_REQUIRE_GPU();
    const std::string dir = test::fixtures_dir() + "/quant/" + GetParam();
    Checkpoint ckpt(dir);
    const ConfigReader cfg = ConfigReader::from_file(dir + "/config.json");
    const QuantConfig qc = QuantConfig::from_config(cfg);
    const int64_t H = cfg.get<int64_t>("hidden_size"), I = cfg.get<int64_t>("intermediate_size");
    const int64_t D = cfg.get_or<int64_t>("head_dim", H / cfg.get<int64_t>("num_attention_heads"));
    const int64_t q = cfg.get<int64_t>("num_attention_heads") * D, kv = cfg.get<int64_t>("num_key_value_heads") * D;
    CudaBackend be(0, DType::BF16);
    ModelInfo info;
    WeightLoader wl(be, ckpt, qc, info);
    const std::string p = "model.layers.0.";
    const Group qkv{{p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"}, {q, kv, kv}};
    const Group gu{{p + "mlp.gate_proj", p + "mlp.up_proj"}, {I, I}};
    const ProjGroup g1 = load_proj_group(wl, qkv.parts, H, qkv.widths, false);
    const ProjGroup g2 = load_proj_group(wl, gu.parts, H, gu.widths, false);
    // Every fixture here stacks at least one of its groups (qwen3_gptq has its own act-order per projection).
    EXPECT_LT(g1.n_units() + g2.n_units(), 5u) << GetParam();
    check_group(be, g1, qkv, H, GetParam() + " qkv");
    check_group(be, g2, gu, H, GetParam() + " gate_up");
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaQuantStack, ::testing::Values("qwen3_awq", "qwen3_ct", "qwen3_ct_asym", "qwen3_fp8"));

}  // namespace
}  // namespace grimoire
