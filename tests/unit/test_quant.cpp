// Quantized checkpoint formats on the CPU: layers written by tools/quantize.py (tests/fixtures/quant/, made by
// tools/make_quant_fixtures.py) load through load_linear, dequantize bit-exactly to the python-side unpack of
// the written tensors (dequant.safetensors), and forward() matches an fp64 matmul of that weight and is the
// CPU matmul of the dequantized weight bit for bit. Modules the
// format cannot hold, or the config keeps unquantized, load as plain BF16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "../test_util.h"
#include "backend/backend.h"
#include "core/error.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/kernels.h"
#include "quant/linear.h"

namespace grimoire {
namespace {

std::string quant_fixture(const std::string& name) { return test::fixtures_dir() + "/quant/" + name; }

QuantConfig config_of(const std::string& dir) {
    return QuantConfig::from_config(ConfigReader::from_file(dir + "/config.json"));
}

const char* const kModules[] = {"layer.q_proj", "layer.up_proj", "layer.odd_proj", "layer.kept_proj"};

class QuantLayer : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantLayer, DequantBitExactAndForwardMatchesFp64) {
    const std::string dir = quant_fixture(GetParam());
    auto be = make_cpu_backend();
    Checkpoint ckpt(dir);
    const QuantConfig qc = config_of(dir);
    SafetensorsFile ref(dir + "/dequant.safetensors");
    int quantized = 0;
    std::mt19937 rng(std::random_device{}());  // fresh inputs each run
    std::normal_distribution<float> nd;
    for (const std::string m : kModules) {
        auto lin = load_linear(*be, ckpt, m, qc);
        const int64_t N = lin->out_features(), K = lin->in_features();
        const std::vector<float> w = lin->dequantize();
        ASSERT_EQ(w.size(), static_cast<size_t>(N * K));
        auto it = ref.tensors().find(m + ".weight");
        if (it == ref.tensors().end()) {
            // Left unquantized: the BF16 weight as stored.
            EXPECT_EQ(lin->format(), "BF16") << m;
            const std::vector<float> want = ckpt.get(m + ".weight").to_f32();
            EXPECT_EQ(0, std::memcmp(w.data(), want.data(), w.size() * 4)) << m;
            continue;
        }
        ++quantized;
        EXPECT_NE(lin->format(), "BF16") << m;
        const std::vector<float> want = it->second.to_f32();
        ASSERT_EQ(want.size(), w.size()) << m;
        size_t mismatches = 0;
        for (size_t i = 0; i < w.size(); ++i) mismatches += std::memcmp(&w[i], &want[i], 4) != 0;
        EXPECT_EQ(mismatches, 0u) << GetParam() << " " << m << " (" << lin->format() << ")";
        EXPECT_LT(lin->weight_bytes(), static_cast<size_t>(N * K * 2)) << m;  // smaller than BF16

        // forward() vs fp64 matmul of the reference weight (+ bias). fp32 accumulation over K terms: the error
        // is bounded by ~K * eps * sum|x w|; 1e-5 * sum|x w| is > 10x that margin for K <= 256 and far below a
        // wrong nibble (|scale| ~ 1e-2 of one term).
        // One to four rows take the fused path (codes widened in the dot product), five the tiled one.
        for (int64_t T : {1, 3, 5}) {
            std::vector<float> x(static_cast<size_t>(T * K)), y(static_cast<size_t>(T * N), NAN);
            for (float& v : x) v = nd(rng);
            Tensor xt(x.data(), DType::F32, Device::CPU, {T, K}), yt(y.data(), DType::F32, Device::CPU, {T, N});
            lin->forward(*be, xt, yt);
            const TensorInfo* b = ckpt.find(m + ".bias");
            const std::vector<float> bias = b ? b->to_f32() : std::vector<float>(static_cast<size_t>(N), 0.f);
            // The quantized matmul is matmul on its dequantized weight, sum for sum (one order on the CPU, so the
            // BF16 and quantized paths of a model differ only by their weights), then the bias.
            std::vector<float> plain(static_cast<size_t>(T * N));
            cpu::matmul(x.data(), w.data(), DType::F32, T, K, N, plain.data());
            for (int64_t t = 0; t < T; ++t)
                for (int64_t n = 0; n < N; ++n) {
                    const float want_y = b ? plain[t * N + n] + bias[static_cast<size_t>(n)] : plain[t * N + n];
                    ASSERT_EQ(0, std::memcmp(&y[t * N + n], &want_y, 4)) << m << " t " << t << " n " << n;
                }
            for (int64_t t = 0; t < T; ++t)
                for (int64_t n = 0; n < N; ++n) {
                    double acc = bias[static_cast<size_t>(n)], mag = 0;
                    for (int64_t k = 0; k < K; ++k) {
                        const double p = double(x[t * K + k]) * double(want[n * K + k]);
                        acc += p;
                        mag += std::fabs(p);
                    }
                    ASSERT_NEAR(y[t * N + n], acc, 1e-5 * mag + 1e-6) << m << " t " << t << " n " << n;
                }
        }
    }
    EXPECT_GE(quantized, 2) << "fixture quantized too few modules";
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantLayer,
                         ::testing::Values("gptq_sym_g128", "gptq_asym_g32_actorder", "gptq_v2_asym_g64",
                                           "gptq_v2_sym_actorder_chan", "autoround_gptq_asym_g128",
                                           "autoround_awq_asym_g64", "autoround_awq_sym_g128", "ct_sym_g32",
                                           "ct_asym_g128", "ct_asym_g64", "ct_asym_chan",
                                           "fp8_block", "fp8_channel"));

TEST(QuantFormats, FormatNamesSayWhatWasDecoded) {
    auto be = make_cpu_backend();
    auto fmt = [&](const std::string& v, const std::string& m) {
        const std::string dir = quant_fixture(v);
        Checkpoint ckpt(dir);
        return load_linear(*be, ckpt, m, config_of(dir))->format();
    };
    EXPECT_EQ(fmt("gptq_sym_g128", "layer.q_proj"), "gptq int4 g128 g_idx");
    EXPECT_EQ(fmt("gptq_v2_asym_g64", "layer.q_proj"), "gptq_v2 int4 g64 g_idx");
    EXPECT_EQ(fmt("autoround_gptq_asym_g128", "layer.q_proj"), "gptq int4 g128");
    EXPECT_EQ(fmt("autoround_awq_asym_g64", "layer.q_proj"), "awq int4 g64");
    EXPECT_EQ(fmt("ct_sym_g32", "layer.q_proj"), "compressed-tensors int4 g32");
    EXPECT_EQ(fmt("ct_asym_g64", "layer.q_proj"), "compressed-tensors int4 g64 asym");
    EXPECT_EQ(fmt("ct_asym_chan", "layer.odd_proj"), "compressed-tensors int4 g136 asym");
    EXPECT_EQ(fmt("fp8_block", "layer.odd_proj"), "fp8 e4m3 128x128");
    EXPECT_EQ(fmt("fp8_channel", "layer.q_proj"), "fp8 e4m3 per-channel");
}

// A copy of a fixture with its quantization_config edited, in a fresh temp dir.
std::string with_config(const std::string& variant, const std::function<void(nlohmann::json&)>& edit) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("grimoire_quant_" + variant + "_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    fs::copy_file(quant_fixture(variant) + "/model.safetensors", dir / "model.safetensors",
                  fs::copy_options::overwrite_existing);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(quant_fixture(variant) + "/config.json"));
    edit(cfg);
    std::ofstream(dir / "config.json") << cfg.dump();
    return dir.string();
}

void expect_error(const std::string& dir, const std::string& module, const std::string& needle) {
    auto be = make_cpu_backend();
    Checkpoint ckpt(dir);
    try {
        load_linear(*be, ckpt, module, config_of(dir));
        ADD_FAILURE() << "no error for " << dir << " " << module;
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(needle), std::string::npos) << msg;
        EXPECT_NE(msg.find(module), std::string::npos) << "error does not name the tensor: " << msg;
    }
    std::filesystem::remove_all(dir);
}

TEST(QuantFormats, UnsupportedCombinationsAreRefusedNamingTheTensor) {
    expect_error(with_config("gptq_sym_g128", [](auto& c) { c.erase("quantization_config"); }), "layer.q_proj",
                 "no quantization_config");
    expect_error(with_config("gptq_sym_g128", [](auto& c) { c["quantization_config"]["bits"] = 8; }),
                 "layer.q_proj", "8-bit");
    expect_error(with_config("gptq_sym_g128",
                             [](auto& c) { c["quantization_config"]["checkpoint_format"] = "marlin"; }),
                 "layer.q_proj", "checkpoint_format");
    // act-order promised by the config but no g_idx stored (AutoRound writes none).
    expect_error(with_config("autoround_gptq_asym_g128",
                             [](auto& c) {
                                 c["quantization_config"]["quant_method"] = "gptq";
                                 c["quantization_config"]["desc_act"] = true;
                             }),
                 "layer.q_proj", "g_idx");
    // A GPTQModel dynamic "-:" rule says the module is not quantized, but it is packed.
    expect_error(with_config("gptq_sym_g128",
                             [](auto& c) { c["quantization_config"]["dynamic"] = {{"-:layer\\.q_proj", {}}}; }),
                 "layer.q_proj", "not quantized");
    // AutoRound extra_config bits 16 on a packed module.
    expect_error(with_config("autoround_awq_sym_g128",
                             [](auto& c) {
                                 c["quantization_config"]["extra_config"] = {{"layer.up_proj", {{"bits", 16}}}};
                             }),
                 "layer.up_proj", "not quantized");
    expect_error(with_config("fp8_block", [](auto& c) { c["quantization_config"]["weight_block_size"] = {64, 64}; }),
                 "layer.q_proj", "expected shape");
    expect_error(with_config("ct_sym_g32",
                             [](auto& c) {
                                 c["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 8;
                             }),
                 "layer.q_proj", "4-bit");
    // compressed-tensors asymmetric: the zero-point tensor and the config's `symmetric` must agree.
    auto ct_weights = [](auto& c) -> nlohmann::json& {
        return c["quantization_config"]["config_groups"]["group_0"]["weights"];
    };
    expect_error(with_config("ct_sym_g32", [&](auto& c) { ct_weights(c)["symmetric"] = false; }), "layer.q_proj",
                 "no weight_zero_point");
    expect_error(with_config("ct_asym_g64", [&](auto& c) { ct_weights(c)["symmetric"] = true; }),
                 "layer.q_proj", "symmetric: true");
    expect_error(with_config("ct_asym_g64", [&](auto& c) { ct_weights(c)["strategy"] = "tensor"; }),
                 "layer.q_proj", "group and channel");
    // Scales and zero points for 64-column groups under a channel config.
    expect_error(with_config("ct_asym_g64",
                             [&](auto& c) {
                                 ct_weights(c)["strategy"] = "channel";
                                 ct_weights(c)["group_size"] = nullptr;
                             }),
                 "layer.q_proj", "strategy is channel");
}

}  // namespace
}  // namespace grimoire

namespace grimoire {
namespace {

// The writer's bytes follow the public conventions the readers assume: symmetric GPTQ v1 stores zero 8 as 7 in
// every nibble (0x77777777), gptq_v2 stores 8 itself; the configs carry the exporters' keys.
TEST(QuantFormats, WrittenZerosAndConfigsFollowThePublicConventions) {
    auto words = [](const std::string& v, const std::string& t) {
        SafetensorsFile f(quant_fixture(v) + "/model.safetensors");
        const TensorInfo& ti = f.tensors().at(t);
        std::vector<uint32_t> w(static_cast<size_t>(ti.numel()));
        std::memcpy(w.data(), ti.data, ti.nbytes);
        return w;
    };
    for (uint32_t w : words("gptq_sym_g128", "layer.q_proj.qzeros")) EXPECT_EQ(w, 0x77777777u);
    for (uint32_t w : words("gptq_v2_sym_actorder_chan", "layer.q_proj.qzeros")) EXPECT_EQ(w, 0x88888888u);
    for (uint32_t w : words("autoround_awq_sym_g128", "layer.q_proj.qzeros")) EXPECT_EQ(w, 0x88888888u);
    const QuantConfig g = config_of(quant_fixture("gptq_asym_g32_actorder"));
    EXPECT_EQ(g.method, "gptq");
    EXPECT_EQ(g.raw["checkpoint_format"], "gptq");
    EXPECT_EQ(g.raw["desc_act"], true);
    EXPECT_EQ(g.raw["sym"], false);
    const QuantConfig a = config_of(quant_fixture("autoround_awq_asym_g64"));
    EXPECT_EQ(a.method, "auto-round");
    EXPECT_EQ(a.raw["packing_format"], "auto_round:auto_awq");
    EXPECT_EQ(a.raw["extra_config"]["layer.kept_proj"]["bits"], 16);
    const QuantConfig f = config_of(quant_fixture("fp8_block"));
    EXPECT_EQ(f.method, "fp8");
    EXPECT_EQ(f.raw["weight_block_size"], nlohmann::json::array({128, 128}));
}

// The oracle's INT4 codes are packed two a byte: at odd K, groups of odd size (channel by channel), and runs of
// odd length (the last group at K = 63), dequant_int4_rows is the formula float(q - z) * s on the unpacked
// codes bit for bit, and matmul_int4 is matmul on that weight sum for sum at one to four rows and at more.
TEST(QuantCpuKernels, PackedInt4IsTheFormulaAtOddShapes) {
    std::mt19937 rng(std::random_device{}());
    struct Shape {
        int64_t N, K, group;
    };
    for (const Shape sh : {Shape{3, 13, 5}, Shape{5, 14, 4}, Shape{7, 64, 16}, Shape{4, 63, 16},
                            Shape{2, 9, 9}, Shape{3, 100, 64}, Shape{2, 96, 48}, Shape{3, 200, 200}}) {
        const int64_t N = sh.N, K = sh.K, G = (K + sh.group - 1) / sh.group;
        std::vector<uint8_t> codes(static_cast<size_t>(N * K));
        for (auto& c : codes) c = static_cast<uint8_t>(rng() & 15);
        std::vector<int32_t> zeros(static_cast<size_t>(G * N)), g_idx(static_cast<size_t>(K));
        std::vector<float> scales(static_cast<size_t>(G * N));
        for (auto& z : zeros) z = static_cast<int32_t>(rng() % 16);
        std::uniform_real_distribution<float> ud(-0.05f, 0.05f);
        for (auto& v : scales) v = ud(rng);
        for (int64_t k = 0; k < K; ++k) g_idx[static_cast<size_t>(k)] = static_cast<int32_t>(k / sh.group);
        const std::vector<uint8_t> packed = cpu::pack_int4(codes.data(), N, K);
        ASSERT_EQ(packed.size(), static_cast<size_t>(N * ((K + 31) / 32 * 16)));
        const cpu::Int4Weights w{packed.data(), zeros.data(), scales.data(), g_idx.data(), N, K, G};
        std::vector<float> deq(static_cast<size_t>(N * K));
        cpu::dequant_int4_rows(w, 0, N, deq.data());
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k) {
                const size_t g = static_cast<size_t>(g_idx[static_cast<size_t>(k)] * N + n);
                const float want = static_cast<float>(codes[static_cast<size_t>(n * K + k)] - zeros[g]) * scales[g];
                ASSERT_EQ(0, std::memcmp(&deq[static_cast<size_t>(n * K + k)], &want, 4))
                    << "N " << N << " K " << K << " n " << n << " k " << k;
            }
        for (int64_t T : {1, 3, 6}) {
            std::vector<float> x(static_cast<size_t>(T * K)), y(static_cast<size_t>(T * N), NAN),
                want(static_cast<size_t>(T * N));
            for (float& v : x) v = ud(rng) * 20;
            cpu::matmul_int4(x.data(), w, T, y.data());
            cpu::matmul(x.data(), deq.data(), DType::F32, T, K, N, want.data());
            EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << "N " << N << " K " << K << " T " << T;
        }
    }
}

}  // namespace
}  // namespace grimoire
