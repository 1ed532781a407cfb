// compressed-tensors `pack-quantized` INT4 (W4A16, the llm-compressor / AutoRound export):
//   weight_packed i32 [N, ceil(K/8)]: packed along K, element 8c+j in bits 4j..4j+3 of word c, stored as the
//       signed value + 8 (offset binary: pack_to_int32 adds 2^(bits-1) before packing; in
//       compressed_tensors/compressors/pack_quantized/helpers.py as of 0.20.1, checked against it by
//       tests/unit/test_quant_reference.cpp);
//   weight_scale [N, G] (bf16/fp16; note: [out, groups], the transpose of GPTQ's scales);
//   weight_shape i64/i32 [2] = (N, K); optional weight_g_idx i32 [K] (actorder "group").
// W[n, k] = (stored - 8) * scale[n, g(k)]: the canonical INT4 form with zero point 8.
// Asymmetric (`symmetric: false`, group or channel strategy): weight_zero_point i32 [ceil(N/8), G] holds the
// signed zero point z in [-8, 7] packed ALONG N (pack_to_int32(zp, 4, packed_dim=0): zero of row 8r+j in bits
// 4j..4j+3 of word [r, g]), also offset by +8. The library dequantizes (q_signed - z) * scale, which is
// (stored_q - stored_z) * scale: the stored nibble is the canonical real zero point as it is.
#include <cstring>
#include <regex>

#include "core/error.h"
#include "quant/formats.h"
#include "quant/quantized.h"

namespace grimoire {

using namespace quant_detail;

namespace {

// The `weights` args of the config group that covers this module (the first whose targets name "Linear" or a
// `re:` pattern matching it), or of the only group.
nlohmann::json weight_args(const QuantConfig& qc, const std::string& prefix) {
    if (!qc.raw.contains("config_groups")) return {};
    const auto& groups = qc.raw["config_groups"];
    for (const auto& [name, g] : groups.items()) {
        for (const auto& t : g.value("targets", nlohmann::json::array())) {
            const std::string s = t.get<std::string>();
            const bool hit = s == "Linear" || s == prefix ||
                             (s.rfind("re:", 0) == 0 && std::regex_search(prefix, std::regex(s.substr(3))));
            if (hit) return g.value("weights", nlohmann::json::object());
        }
    }
    return groups.size() == 1 ? groups.begin()->value("weights", nlohmann::json::object()) : nlohmann::json{};
}

}  // namespace

std::optional<QuantHost> quant_detail::read_compressed_tensors(
    Backend& /*be*/, const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& qc, bool allow_bias) {
    const TensorInfo* wp = ckpt.find(prefix + ".weight_packed");
    if (!wp) return std::nullopt;
    if (qc.method != "compressed-tensors")
        fail(*wp, "packed weights but quant_method is '" + qc.method + "' (expected compressed-tensors)");
    const nlohmann::json args = weight_args(qc, prefix);
    if (args.is_object() && !args.empty()) {
        if (args.value("num_bits", 4) != 4) fail(*wp, "only 4-bit pack-quantized is supported");
        if (args.value("type", std::string("int")) != "int") fail(*wp, "only type int is supported");
    }
    const TensorInfo* zp = ckpt.find(prefix + ".weight_zero_point");
    const bool has_sym = args.is_object() && args.contains("symmetric") && args["symmetric"].is_boolean();
    const bool sym = !has_sym || args["symmetric"].get<bool>();
    if (zp && sym && has_sym)
        fail(*zp, "stored, but the config says symmetric: true");
    if (!zp && !sym) fail(*wp, "config says symmetric: false but there is no weight_zero_point tensor");
    if (zp && args.is_object() && args.contains("strategy") && args["strategy"] != "group" &&
        args["strategy"] != "channel")
        fail(*zp, "asymmetric pack-quantized is supported for group and channel strategies only, not " +
                      args["strategy"].dump());
    const TensorInfo* sc = ckpt.find(prefix + ".weight_scale");
    const TensorInfo* ws = ckpt.find(prefix + ".weight_shape");
    if (!sc || !ws) fail(*wp, "has no companion " + std::string(!sc ? "weight_scale" : "weight_shape") + " tensor");
    if (ws->numel() != 2 || (ws->dtype != DType::I64 && ws->dtype != DType::I32))
        fail(*ws, "expected 2 integers (out, in)");
    // memcpy: safetensors only aligns the data section, so an i64 after an odd number of i32 words is misaligned.
    int64_t shp[2];
    for (int i = 0; i < 2; ++i) {
        if (ws->dtype == DType::I64) {
            std::memcpy(&shp[i], ws->data + 8 * i, 8);
        } else {
            int32_t v;
            std::memcpy(&v, ws->data + 4 * i, 4);
            shp[i] = v;
        }
    }
    const int64_t N = shp[0], K = shp[1];
    if (N <= 0 || K <= 0) fail(*ws, "non-positive shape");
    expect_shape(*wp, {N, (K + 7) / 8});
    if (sc->shape.size() != 2 || sc->shape[0] != N || sc->shape[1] < 1 || sc->shape[1] > K)
        fail(*sc, "expected shape [" + std::to_string(N) + ", groups], found " + shape_str(sc->shape));
    const int64_t G = sc->shape[1];
    if (G != 1 && args.is_object() && args.value("strategy", nlohmann::json()) == "channel")
        fail(*sc, "has " + std::to_string(G) + " groups but the config's strategy is channel (1 group)");

    Int4Host h;
    h.N = N, h.K = K, h.G = G;
    // Transpose the scales to the canonical [G, N].
    const std::vector<float> s = read_scales(*sc);
    h.scales.resize(static_cast<size_t>(G * N));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t g = 0; g < G; ++g) h.scales[static_cast<size_t>(g * N + n)] = s[static_cast<size_t>(n * G + g)];
    if (zp) {
        // Packed along N: the words of group g are column g of [ceil(N/8), G].
        expect_shape(*zp, {(N + 7) / 8, G});
        const std::vector<int32_t> zw = read_i32(*zp);
        h.zeros.resize(static_cast<size_t>(G * N));
        for (int64_t g = 0; g < G; ++g)
            for (int64_t n = 0; n < N; ++n) {
                const uint32_t w = static_cast<uint32_t>(zw[static_cast<size_t>((n / 8) * G + g)]);
                h.zeros[static_cast<size_t>(g * N + n)] = static_cast<int32_t>((w >> (4 * (n % 8))) & 0xF);
            }
    } else {
        h.zeros.assign(static_cast<size_t>(G * N), 8);
    }
    if (const TensorInfo* gi = ckpt.find(prefix + ".weight_g_idx")) {
        expect_shape(*gi, {K});
        h.g_idx = read_i32(*gi);
        for (int32_t g : h.g_idx)
            if (g < 0 || g >= G) fail(*gi, "group index " + std::to_string(g) + " outside [0, " + std::to_string(G) + ")");
    } else {
        const int64_t group = args.is_object() && args.value("strategy", std::string("group")) == "group" &&
                                      args.contains("group_size") && !args["group_size"].is_null()
                                  ? args["group_size"].get<int64_t>()
                                  : (K + G - 1) / G;
        if (group <= 0 || (K + group - 1) / group != G)
            fail(*sc, "has " + std::to_string(G) + " groups, which K = " + std::to_string(K) + " with group size " +
                          std::to_string(group) + " does not give");
        h.g_idx.resize(static_cast<size_t>(K));
        for (int64_t k = 0; k < K; ++k) h.g_idx[static_cast<size_t>(k)] = static_cast<int32_t>(k / group);
    }
    const std::vector<int32_t> words = read_i32(*wp);
    const int64_t KW = (K + 7) / 8;
    h.q.resize(static_cast<size_t>(N * K));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
            const uint32_t w = static_cast<uint32_t>(words[static_cast<size_t>(n * KW + k / 8)]);
            h.q[static_cast<size_t>(n * K + k)] = static_cast<uint8_t>((w >> (4 * (k % 8))) & 0xF);
        }
    const size_t bytes = wp->nbytes + sc->nbytes + (zp ? zp->nbytes : 0);
    return host_of(std::move(h), find_bias(ckpt, prefix, N, allow_bias),
                   "compressed-tensors int4 g" + std::to_string((K + G - 1) / G) + (zp ? " asym" : ""), bytes);
}

std::unique_ptr<Linear> probe_compressed_tensors(
    Backend& be, const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& qc, bool allow_bias) {
    return linear_or_null(be, read_compressed_tensors(be, ckpt, prefix, qc, allow_bias));
}

}  // namespace grimoire
