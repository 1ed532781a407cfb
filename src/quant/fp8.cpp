// FP8 E4M3 weights:
//   block-scaled (quant_method fp8, DeepSeek-V3 style): `weight` F8_E4M3 [N, K] + `weight_scale_inv` f32
//   [ceil(N/bn), ceil(K/bk)], bn x bk = weight_block_size (128 x 128). Despite its name the scale MULTIPLIES
//   (DeepSeek-V3 inference/kernel.py weight_dequant: y = x * s per tile).
//   per-channel / per-tensor (compressed-tensors float-quantized, fp8 with weight_scale): `weight_scale` [N],
//   [N, 1], [1] or [] — also a multiplier. A 2-D [ceil(N/bn), ceil(K/bk)] weight_scale is the block strategy.
// W[n, k] = f32(w[n, k]) * s[n / bn, k / bk], the same fp32 product the python reference computes.
#include "core/error.h"
#include "quant/formats.h"
#include "quant/quantized.h"

namespace grimoire {

using namespace quant_detail;

std::optional<QuantHost> quant_detail::read_fp8(
    Backend& be, const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& qc, bool allow_bias) {
    const TensorInfo* w = ckpt.find(prefix + ".weight");
    if (!w) return std::nullopt;
    const TensorInfo* sinv = ckpt.find(prefix + ".weight_scale_inv");
    const TensorInfo* sc = sinv ? sinv : ckpt.find(prefix + ".weight_scale");
    const bool is_fp8 = w->dtype == DType::F8_E4M3 || w->dtype == DType::F8_E5M2;
    if (!is_fp8) {
        if (sinv) fail(*sinv, "a block scale beside a " + std::string(dtype_name(w->dtype)) + " weight (expected F8_E4M3)");
        return std::nullopt;  // a plain weight: the dense probe's
    }
    if (w->dtype != DType::F8_E4M3) fail(*w, "FP8 E5M2 weights are not supported (E4M3 only)");
    if (!sc) fail(*w, "FP8 weight without weight_scale_inv or weight_scale");
    if (w->shape.size() != 2) fail(*w, "expected a 2-D [out, in] weight, found " + shape_str(w->shape));
    Fp8Host h;
    h.N = w->shape[0], h.K = w->shape[1];
    const int64_t N = h.N, K = h.K;
    const std::vector<int64_t>& ss = sc->shape;
    const auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
    if (sinv || (ss.size() == 2 && ss[1] > 1)) {
        int64_t bn = 128, bk = 128;
        if (qc.raw.contains("weight_block_size") && qc.raw["weight_block_size"].is_array() &&
            qc.raw["weight_block_size"].size() == 2) {
            bn = qc.raw["weight_block_size"][0].get<int64_t>();
            bk = qc.raw["weight_block_size"][1].get<int64_t>();
        }
        if (bn <= 0 || bk <= 0) fail(*sc, "weight_block_size must be positive");
        expect_shape(*sc, {cdiv(N, bn), cdiv(K, bk)});
        h.bn = bn, h.bk = bk;
    } else if (sc->numel() == N && (ss == std::vector<int64_t>{N} || ss == std::vector<int64_t>{N, 1})) {
        h.bn = 1, h.bk = K;  // per output channel
    } else if (sc->numel() == 1) {
        h.bn = N, h.bk = K;  // per tensor
    } else {
        fail(*sc, "scale shape " + shape_str(ss) + " fits neither blocks, channels nor the tensor of weight " +
                      shape_str(w->shape));
    }
    if (!be.random_weights()) {  // random weights: shapes only, the device fills the data
        h.scales = read_scales(*sc);
        h.w.assign(w->data, w->data + w->nbytes);
    }
    const size_t bytes = w->nbytes + sc->nbytes;
    const std::string kind = h.bn == 1 && h.bk == K ? "per-channel"
                             : h.bn == N && h.bk == K && N != 1 ? "per-tensor"
                                                                : std::to_string(h.bn) + "x" + std::to_string(h.bk);
    return host_of(std::move(h), find_bias(ckpt, prefix, N, allow_bias), "fp8 e4m3 " + kind, bytes);
}

std::unique_ptr<Linear> probe_fp8(
    Backend& be, const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& qc, bool allow_bias) {
    return linear_or_null(be, read_fp8(be, ckpt, prefix, qc, allow_bias));
}

}  // namespace grimoire
