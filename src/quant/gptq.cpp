// GPTQ-family INT4 readers: GPTQ (AutoGPTQ / GPTQModel, checkpoint_format gptq = v1 and gptq_v2), AutoRound
// exports in auto_round:auto_gptq packing (= GPTQ v1 bytes) and auto_round:auto_awq / AutoAWQ GEMM packing.
//
// Layouts (../shared/reference/models-and-formats.md §3.1-3.2; checked against GPTQModel
// gptqmodel/nn_modules/qlinear/__init__.py pack/dequantize_weight, AutoAWQ awq/utils/packing_utils.py
// AWQ_ORDER / AWQ_REVERSE_ORDER, and vLLM's gptq.py / awq.py loaders):
//   GPTQ: qweight i32 [K/8, N], input channel 8r+j in bits 4j..4j+3 of row r (packed along K);
//         qzeros i32 [G, N/8], output channel 8c+j in bits 4j of column c (packed along N);
//         scales f16/bf16 [G, N]; g_idx i32 [K] (act-order; absent means k / group_size).
//         v1 stores zero - 1 (the reference torch path adds 1 after unpacking), v2 stores the zero itself.
//   AWQ:  qweight i32 [K, N/8] and qzeros i32 [G, N/8], both packed along N with nibble i holding logical
//         column 8c + AWQ_ORDER[i], AWQ_ORDER = {0,2,4,6,1,3,5,7}; zeros raw; scales [G, N]; no g_idx.
#include <regex>

#include "core/error.h"
#include "quant/formats.h"
#include "quant/quantized.h"

namespace grimoire {

using namespace quant_detail;

namespace {

enum class Packing { GptqV1, GptqV2, Awq };

struct LayerQuant {
    bool quantized = true;
    int bits = 4;
    int64_t group_size = 0;  // 0 = not stated (inferred from the scales' rows)
    bool desc_act = false;
    Packing packing = Packing::GptqV1;
};

// Python's re.match: the pattern anchored at the start of the module name.
bool re_match(const std::string& pattern, const std::string& name) {
    try {
        return std::regex_search(name, std::regex(pattern), std::regex_constants::match_continuous);
    } catch (const std::regex_error&) {
        return false;  // a key that is not a valid ECMAScript regex can still match exactly (below)
    }
}

void apply_overrides(LayerQuant& lq, const nlohmann::json& o) {
    if (o.contains("bits")) lq.bits = o["bits"].get<int>();
    if (o.contains("group_size")) lq.group_size = o["group_size"].get<int64_t>();
    if (o.contains("desc_act")) lq.desc_act = o["desc_act"].get<bool>();
    if (lq.bits >= 16) lq.quantized = false;  // AutoRound extra_config: bits 16 = left unquantized
}

// The configuration that applies to module `prefix`, from the checkpoint-wide quantization_config plus the
// per-module overrides: GPTQModel `dynamic` ("-:re" = not quantized, "+:re" or "re" = overrides; the first
// matching key wins, as GPTQModel's dynamic_get does) or AutoRound `extra_config` (exact name or regex).
LayerQuant layer_quant(const QuantConfig& qc, const std::string& prefix, const TensorInfo& qweight) {
    if (qc.method.empty() || !qc.raw.is_object())
        fail(qweight, "packed INT weights but config.json has no quantization_config");
    const nlohmann::json& raw = qc.raw;
    LayerQuant lq;
    lq.bits = raw.value("bits", raw.value("w_bit", 4));
    lq.group_size = raw.value("group_size", raw.value("q_group_size", int64_t{0}));
    lq.desc_act = raw.value("desc_act", false);
    if (qc.method == "gptq") {
        const std::string cf = raw.value("checkpoint_format", std::string("gptq"));
        if (cf == "gptq") lq.packing = Packing::GptqV1;
        else if (cf == "gptq_v2") lq.packing = Packing::GptqV2;
        else fail(qweight, "GPTQ checkpoint_format '" + cf + "' is not supported (gptq, gptq_v2)");
        if (raw.contains("dynamic") && raw["dynamic"].is_object()) {
            for (const auto& [key, val] : raw["dynamic"].items()) {
                const bool skip = key.rfind("-:", 0) == 0;
                const std::string pat = key.rfind("+:", 0) == 0 || skip ? key.substr(2) : key;
                if (!re_match(pat, prefix)) continue;
                if (skip) lq.quantized = false;
                else apply_overrides(lq, val);
                break;
            }
        }
    } else if (qc.method == "auto-round" || qc.method == "intel/auto-round") {
        const std::string pf = raw.value("packing_format", raw.value("backend", std::string("auto_round:auto_gptq")));
        lq.packing = pf.find("awq") != std::string::npos ? Packing::Awq : Packing::GptqV1;
        if (pf.find("gptq_v2") != std::string::npos) lq.packing = Packing::GptqV2;
        if (raw.contains("extra_config") && raw["extra_config"].is_object()) {
            const auto& ec = raw["extra_config"];
            if (ec.contains(prefix)) {
                apply_overrides(lq, ec[prefix]);
            } else {
                for (const auto& [key, val] : ec.items())
                    if (re_match(key, prefix)) {
                        apply_overrides(lq, val);
                        break;
                    }
            }
        }
    } else if (qc.method == "awq") {
        lq.packing = Packing::Awq;
        const std::string ver = raw.value("version", std::string("gemm"));
        if (ver != "gemm" && ver != "GEMM")
            fail(qweight, "AWQ version '" + ver + "' is not supported (only the GEMM packing)");
    } else {
        fail(qweight, "packed INT weights (qweight) but quant_method is '" + qc.method + "'");
    }
    return lq;
}

uint8_t nib(uint32_t word, int j) { return static_cast<uint8_t>((word >> (4 * j)) & 0xF); }

constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // nibble i holds logical column AWQ_ORDER[i]

}  // namespace

std::optional<QuantHost> quant_detail::read_gptq(
    Backend& be, const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& qc, bool allow_bias) {
    const TensorInfo* qw = ckpt.find(prefix + ".qweight");
    if (!qw) return std::nullopt;
    const LayerQuant lq = layer_quant(qc, prefix, *qw);
    if (!lq.quantized) fail(*qw, "the quantization config says this module is not quantized, but it is packed");
    if (lq.bits != 4) fail(*qw, std::to_string(lq.bits) + "-bit packing is not supported (4-bit only)");
    const TensorInfo* qz = ckpt.find(prefix + ".qzeros");
    const TensorInfo* sc = ckpt.find(prefix + ".scales");
    if (!qz || !sc) fail(*qw, "has no companion " + std::string(!qz ? "qzeros" : "scales") + " tensor");
    if (qw->shape.size() != 2 || sc->shape.size() != 2)
        fail(*qw, "qweight and scales must be 2-D, found " + shape_str(qw->shape) + " and " + shape_str(sc->shape));
    const bool awq = lq.packing == Packing::Awq;
    const int64_t K = awq ? qw->shape[0] : qw->shape[0] * 8;
    const int64_t N = awq ? qw->shape[1] * 8 : qw->shape[1];
    const int64_t G = sc->shape[0];
    if (N % 8) fail(*sc, "output features " + std::to_string(N) + " are not a multiple of 8 (zeros pack 8 per word)");
    expect_shape(*sc, {G, N});
    expect_shape(*qz, {G, N / 8});
    if (G < 1 || G > K) fail(*sc, "group count " + std::to_string(G) + " does not fit K = " + std::to_string(K));

    Int4Host h;
    h.N = N, h.K = K, h.G = G;
    const std::string name = awq ? "awq" : lq.packing == Packing::GptqV2 ? "gptq_v2" : "gptq";
    // g_idx: stored (act-order; AWQ has none), else consecutive groups of group_size (-1 / absent: K / G
    // rounded up).
    const TensorInfo* gi = awq ? nullptr : ckpt.find(prefix + ".g_idx");
    const size_t bytes = qw->nbytes + qz->nbytes + sc->nbytes + (gi ? gi->nbytes : 0);
    if (gi) {
        expect_shape(*gi, {K});
        h.g_idx = read_i32(*gi);
        for (int32_t g : h.g_idx)
            if (g < 0 || g >= G) fail(*gi, "group index " + std::to_string(g) + " outside [0, " + std::to_string(G) + ")");
    } else {
        if (lq.desc_act) fail(*qw, "desc_act (act-order) is set but there is no g_idx tensor");
        const int64_t group = lq.group_size > 0 ? lq.group_size : (K + G - 1) / G;
        if ((K + group - 1) / group != G)
            fail(*sc, "has " + std::to_string(G) + " groups but K = " + std::to_string(K) + " with group_size " +
                          std::to_string(group) + " needs " + std::to_string((K + group - 1) / group));
        h.g_idx.resize(static_cast<size_t>(K));
        for (int64_t k = 0; k < K; ++k) h.g_idx[static_cast<size_t>(k)] = static_cast<int32_t>(k / group);
    }

    if (be.random_weights())  // shapes and groups only: the device fills the packed data
        return host_of(std::move(h), find_bias(ckpt, prefix, N, allow_bias),
                       name + " int4 g" + std::to_string(K / G) + " (random)", bytes);
    h.scales = read_scales(*sc);
    const std::vector<int32_t> words = read_i32(*qw), zwords = read_i32(*qz);

    h.q.resize(static_cast<size_t>(N * K));
    h.zeros.resize(static_cast<size_t>(G * N));
    if (awq) {
        for (int64_t k = 0; k < K; ++k)
            for (int64_t c = 0; c < N / 8; ++c) {
                const uint32_t w = static_cast<uint32_t>(words[static_cast<size_t>(k * (N / 8) + c)]);
                for (int i = 0; i < 8; ++i) h.q[static_cast<size_t>((c * 8 + kAwqOrder[i]) * K + k)] = nib(w, i);
            }
        for (int64_t g = 0; g < G; ++g)
            for (int64_t c = 0; c < N / 8; ++c) {
                const uint32_t w = static_cast<uint32_t>(zwords[static_cast<size_t>(g * (N / 8) + c)]);
                for (int i = 0; i < 8; ++i) h.zeros[static_cast<size_t>(g * N + c * 8 + kAwqOrder[i])] = nib(w, i);
            }
    } else {
        for (int64_t r = 0; r < K / 8; ++r)
            for (int64_t n = 0; n < N; ++n) {
                const uint32_t w = static_cast<uint32_t>(words[static_cast<size_t>(r * N + n)]);
                for (int j = 0; j < 8; ++j) h.q[static_cast<size_t>(n * K + r * 8 + j)] = nib(w, j);
            }
        // v1: zero - 1 is stored; a stored 15 (a wrapped -1, the v1 overflow) reads back as 16, as the
        // reference `zeros + 1` path does.
        const int32_t offset = lq.packing == Packing::GptqV1 ? 1 : 0;
        for (int64_t g = 0; g < G; ++g)
            for (int64_t c = 0; c < N / 8; ++c) {
                const uint32_t w = static_cast<uint32_t>(zwords[static_cast<size_t>(g * (N / 8) + c)]);
                for (int j = 0; j < 8; ++j) h.zeros[static_cast<size_t>(g * N + c * 8 + j)] = nib(w, j) + offset;
            }
    }

    return host_of(std::move(h), find_bias(ckpt, prefix, N, allow_bias),
                   name + " int4 g" + std::to_string(K / G) + (gi ? " g_idx" : ""), bytes);
}

std::unique_ptr<Linear> probe_gptq(
    Backend& be, const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& qc, bool allow_bias) {
    return linear_or_null(be, read_gptq(be, ckpt, prefix, qc, allow_bias));
}

}  // namespace grimoire
