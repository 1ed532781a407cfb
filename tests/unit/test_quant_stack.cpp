// Stacked quantized projections (load_proj_group over quantized parts): a group whose parts agree (same K,
// groups, act-order permutation, symmetry; FP8: same block grid with whole blocks before the last part) loads
// as one Linear, and its outputs, for one token (views) and for several (forward_split), equal the separate
// parts' outputs exactly. Parts that cannot be stacked form sub-groups or stay separate and still load.
// Checkpoints are written here from random packed data (GPTQ v1 INT4, FP8 block-scaled, BF16), fresh each run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include <unistd.h>

#include "backend/backend.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "model/layers.h"
#include "quant/linear.h"

namespace grimoire {
namespace {

namespace fs = std::filesystem;

struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};

template <class T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

// config.json + model.safetensors in a fresh directory.
std::string write_checkpoint(const std::string& tag, const nlohmann::json& qcfg, const std::vector<Entry>& ts) {
    const fs::path dir = fs::temp_directory_path() / ("grimoire_quant_stack_" + tag + "_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << nlohmann::json{{"model_type", "test"}, {"quantization_config", qcfg}}.dump();
    nlohmann::json hdr = nlohmann::json::object();
    size_t off = 0;
    for (const Entry& e : ts) {
        hdr[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
        off += e.bytes.size();
    }
    std::string h = hdr.dump();
    while (h.size() % 8) h += ' ';
    std::ofstream f(dir / "model.safetensors", std::ios::binary);
    const uint64_t len = h.size();
    f.write(reinterpret_cast<const char*>(&len), 8);
    f << h;
    for (const Entry& e : ts) f.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
    return dir.string();
}

std::mt19937& rng() {
    static std::mt19937 r(std::random_device{}());
    return r;
}

// g_idx of K channels in groups of gs: consecutive, or (act-order) a random permutation's.
std::vector<int32_t> make_g_idx(int64_t K, int64_t gs, bool act_order) {
    std::vector<int32_t> order(static_cast<size_t>(K)), g(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) order[static_cast<size_t>(k)] = static_cast<int32_t>(k);
    if (act_order) std::shuffle(order.begin(), order.end(), rng());
    for (int64_t i = 0; i < K; ++i) g[static_cast<size_t>(order[static_cast<size_t>(i)])] = static_cast<int32_t>(i / gs);
    return g;
}

// A GPTQ v1 INT4 layer [N, K] (zeros stored minus one) with the given g_idx; sym: every zero point 8.
void add_gptq(std::vector<Entry>& ts, const std::string& p, int64_t N, int64_t K, int64_t G,
              const std::vector<int32_t>& g_idx, bool sym, bool bias) {
    std::uniform_int_distribution<int> nib(0, 15), zd(1, 15);
    std::uniform_real_distribution<float> sd(0.002f, 0.02f);
    std::vector<int32_t> qw(static_cast<size_t>(K / 8 * N), 0), qz(static_cast<size_t>(G * N / 8), 0);
    for (auto& w : qw)
        for (int j = 0; j < 8; ++j) w |= nib(rng()) << (4 * j);
    for (auto& w : qz)
        for (int j = 0; j < 8; ++j) w |= ((sym ? 8 : zd(rng())) - 1) << (4 * j);
    std::vector<uint16_t> sc(static_cast<size_t>(G * N));
    for (auto& s : sc) s = f32_to_f16(sd(rng()));
    ts.push_back({p + ".qweight", "I32", {K / 8, N}, raw(qw)});
    ts.push_back({p + ".qzeros", "I32", {G, N / 8}, raw(qz)});
    ts.push_back({p + ".scales", "F16", {G, N}, raw(sc)});
    ts.push_back({p + ".g_idx", "I32", {K}, raw(g_idx)});
    if (bias) {
        std::vector<uint16_t> b(static_cast<size_t>(N));
        for (auto& v : b) v = f32_to_bf16(sd(rng()) * 10);
        ts.push_back({p + ".bias", "BF16", {N}, raw(b)});
    }
}

// An FP8 E4M3 layer [N, K] with block scales [ceil(N / bn), ceil(K / bk)].
void add_fp8(std::vector<Entry>& ts, const std::string& p, int64_t N, int64_t K, int64_t bn, int64_t bk) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> sd(0.005f, 0.02f);
    std::vector<uint8_t> w(static_cast<size_t>(N * K));
    for (auto& v : w) v = static_cast<uint8_t>(byte(rng()) & 0xBF);  // never 0x7F / 0xFF (NaN)
    std::vector<float> s(static_cast<size_t>(((N + bn - 1) / bn) * ((K + bk - 1) / bk)));
    for (auto& v : s) v = sd(rng());
    ts.push_back({p + ".weight", "F8_E4M3", {N, K}, w});
    ts.push_back({p + ".weight_scale_inv", "F32", {(N + bn - 1) / bn, (K + bk - 1) / bk}, raw(s)});
}

// An FP8 E4M3 layer [N, K] with one `weight_scale` per row ([N, 1]) or for the whole tensor ([1]).
void add_fp8_rowwise(std::vector<Entry>& ts, const std::string& p, int64_t N, int64_t K, bool per_tensor) {
    add_fp8(ts, p, N, K, N, K);
    ts.pop_back();
    std::uniform_real_distribution<float> sd(0.005f, 0.02f);
    std::vector<float> s(static_cast<size_t>(per_tensor ? 1 : N));
    for (auto& v : s) v = sd(rng());
    ts.push_back({p + ".weight_scale", "F32", per_tensor ? std::vector<int64_t>{1} : std::vector<int64_t>{N, 1}, raw(s)});
}

void add_bf16(std::vector<Entry>& ts, const std::string& p, int64_t N, int64_t K) {
    std::normal_distribution<float> nd(0.f, 0.05f);
    std::vector<uint16_t> w(static_cast<size_t>(N * K));
    for (auto& v : w) v = f32_to_bf16(nd(rng()));
    ts.push_back({p + ".weight", "BF16", {N, K}, raw(w)});
}

nlohmann::json gptq_config(int64_t gs, bool act_order, bool sym) {
    return {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", gs}, {"desc_act", act_order}, {"sym", sym},
            {"checkpoint_format", "gptq"}};
}

nlohmann::json fp8_config(int64_t bn, int64_t bk) {
    return {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {bn, bk}}};
}

// Loads `parts` of checkpoint `dir` as one ProjGroup and as separate Linears; checks the unit count and that
// every part's output is bit-identical for T = 1 and T = 3.
void expect_group_equals_parts(const std::string& dir, const std::vector<std::string>& parts,
                               const std::vector<int64_t>& outs, int64_t K, bool bias, size_t want_units) {
    auto be = make_cpu_backend();
    Checkpoint ckpt(dir);
    const QuantConfig qc = QuantConfig::from_config(ConfigReader::from_file(dir + "/config.json"));
    ModelInfo info;
    WeightLoader wl(*be, ckpt, qc, info);
    const ProjGroup g = load_proj_group(wl, parts, K, outs, bias);
    EXPECT_EQ(g.n_units(), want_units) << dir;
    size_t stored = 0;
    for (size_t u = 0; u < g.n_units(); ++u) stored += g.unit(u).weight_bytes();
    std::vector<std::unique_ptr<Linear>> sep;
    size_t stored_sep = 0;
    for (const auto& p : parts) {
        sep.push_back(load_linear(*be, ckpt, p, qc, bias));
        stored_sep += sep.back()->weight_bytes();
    }
    EXPECT_EQ(stored, stored_sep) << "the stacked group reads what its parts read";
    std::normal_distribution<float> nd;
    for (int64_t T : {1, 3}) {
        be->reset_scratch();
        std::vector<float> x(static_cast<size_t>(T * K));
        for (float& v : x) v = nd(rng());
        Tensor xt = be->scratch(DType::F32, {T, K});
        be->from_host(xt, x.data());
        const std::vector<Tensor> ys = g.forward(*be, xt);
        ASSERT_EQ(ys.size(), parts.size());
        for (size_t i = 0; i < parts.size(); ++i) {
            ASSERT_EQ(ys[i].rows(), T);
            ASSERT_EQ(ys[i].cols(), outs[i]);
            std::vector<float> got(static_cast<size_t>(T * outs[i])), want(got.size(), NAN);
            be->to_host(ys[i], got.data());
            Tensor yt(want.data(), DType::F32, Device::CPU, {T, outs[i]});
            sep[i]->forward(*be, xt, yt);
            EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
                << dir << " part " << parts[i] << " T=" << T << ": stacked output differs";
        }
    }
    fs::remove_all(dir);
}

TEST(QuantStack, Int4SymmetricQkvIsOneLinear) {
    const int64_t K = 256, gs = 32;
    const auto gi = make_g_idx(K, gs, false);
    std::vector<Entry> ts;
    add_gptq(ts, "l.q_proj", 64, K, K / gs, gi, true, false);
    add_gptq(ts, "l.k_proj", 32, K, K / gs, gi, true, false);
    add_gptq(ts, "l.v_proj", 40, K, K / gs, gi, true, false);
    const std::string dir = write_checkpoint("sym", gptq_config(gs, false, true), ts);
    expect_group_equals_parts(dir, {"l.q_proj", "l.k_proj", "l.v_proj"}, {64, 32, 40}, K, false, 1);
}

TEST(QuantStack, Int4AsymActOrderSharedGIdxWithBiasIsOneLinear) {
    // GPTQ's act-order permutation comes from the input's Hessian, so projections of one input share it.
    const int64_t K = 128, gs = 32;
    const auto gi = make_g_idx(K, gs, true);
    std::vector<Entry> ts;
    add_gptq(ts, "l.gate_proj", 48, K, K / gs, gi, false, true);
    add_gptq(ts, "l.up_proj", 48, K, K / gs, gi, false, true);
    const std::string dir = write_checkpoint("asym", gptq_config(gs, true, false), ts);
    expect_group_equals_parts(dir, {"l.gate_proj", "l.up_proj"}, {48, 48}, K, true, 1);
}

TEST(QuantStack, Int4DifferentActOrderOrSymmetryStaysSeparate) {
    const int64_t K = 128, gs = 32;
    std::vector<Entry> ts;
    add_gptq(ts, "l.q_proj", 32, K, K / gs, make_g_idx(K, gs, true), false, false);
    add_gptq(ts, "l.k_proj", 16, K, K / gs, make_g_idx(K, gs, true), false, false);  // its own permutation
    const auto gi = make_g_idx(K, gs, false);
    add_gptq(ts, "l.v_proj", 16, K, K / gs, gi, true, false);
    add_gptq(ts, "l.o_proj", 24, K, K / gs, gi, false, false);  // asym after sym
    const std::string dir = write_checkpoint("apart", gptq_config(gs, true, false), ts);
    expect_group_equals_parts(dir, {"l.q_proj", "l.k_proj", "l.v_proj", "l.o_proj"}, {32, 16, 16, 24}, K, false, 4);
}

TEST(QuantStack, Fp8BlocksStackWhenEarlierPartsFillWholeBlocks) {
    const int64_t K = 192, bn = 32, bk = 64;
    std::vector<Entry> ts;
    add_fp8(ts, "l.a_proj", 64, K, bn, bk);
    add_fp8(ts, "l.b_proj", 40, K, bn, bk);  // 40 is not whole blocks: the next part starts a new unit
    add_fp8(ts, "l.c_proj", 32, K, bn, bk);
    add_fp8(ts, "l.d_proj", 24, K, bn, bk);
    const std::string dir = write_checkpoint("fp8", fp8_config(bn, bk), ts);
    expect_group_equals_parts(dir, {"l.a_proj", "l.b_proj", "l.c_proj", "l.d_proj"}, {64, 40, 32, 24}, K, false, 2);
}

TEST(QuantStack, Fp8PerChannelAndPerTensorStackAsPerChannel) {
    const int64_t K = 96;
    std::vector<Entry> ts;
    add_fp8_rowwise(ts, "l.a_proj", 32, K, false);
    add_fp8_rowwise(ts, "l.b_proj", 24, K, true);
    add_fp8_rowwise(ts, "l.c_proj", 16, K, false);
    const std::string dir = write_checkpoint("fp8row", {{"quant_method", "fp8"}}, ts);
    expect_group_equals_parts(dir, {"l.a_proj", "l.b_proj", "l.c_proj"}, {32, 24, 16}, K, false, 1);
}

TEST(QuantStack, MixedQuantizedAndBf16FormSubGroups) {
    // The DeltaNet in_proj_qkv / z quantized beside BF16 in_proj_b / a: two units (qkv | z, b | a).
    const int64_t K = 128, gs = 64;
    const auto gi = make_g_idx(K, gs, false);
    std::vector<Entry> ts;
    add_gptq(ts, "l.in_proj_qkv", 96, K, K / gs, gi, true, false);
    add_gptq(ts, "l.in_proj_z", 32, K, K / gs, gi, true, false);
    add_bf16(ts, "l.in_proj_b", 8, K);
    add_bf16(ts, "l.in_proj_a", 8, K);
    const std::string dir = write_checkpoint("mixed", gptq_config(gs, false, true), ts);
    expect_group_equals_parts(dir, {"l.in_proj_qkv", "l.in_proj_z", "l.in_proj_b", "l.in_proj_a"}, {96, 32, 8, 8}, K,
                              false, 2);
}

TEST(QuantStack, Fp8NextToBf16StaysApart) {
    // Different formats stay apart (and the FP8 parts around the BF16 one are not neighbours).
    const int64_t K = 128;
    std::vector<Entry> ts;
    add_fp8(ts, "l.x_proj", 32, K, 128, 128);
    add_bf16(ts, "l.y_proj", 16, K);
    add_fp8(ts, "l.z_proj", 16, K, 128, 128);
    const std::string dir = write_checkpoint("fp8bf16", fp8_config(128, 128), ts);
    expect_group_equals_parts(dir, {"l.x_proj", "l.y_proj", "l.z_proj"}, {32, 16, 16}, K, false, 3);
}

}  // namespace
}  // namespace grimoire
