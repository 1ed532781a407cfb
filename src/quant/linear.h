// One interface for every weight format (house rule 7): models call Linear::forward and never branch on
// format. load_linear() inspects the tensors present under a prefix (and the quantization config) and builds
// the matching implementation: BF16/F16/F32 plain weights here; GPTQ, AutoRound, compressed-tensors and FP8
// block-scaled in their own files in src/quant/.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/config.h"
#include "io/safetensors.h"

namespace grimoire {

// The checkpoint's quantization_config (empty when the checkpoint is unquantized).
struct QuantConfig {
    std::string method;  // "", "gptq", "auto-round", "fp8", "compressed-tensors"
    nlohmann::json raw;  // the whole quantization_config object, for format-specific fields
    static QuantConfig from_config(const ConfigReader& cfg);
};

class Linear {
public:
    virtual ~Linear() = default;
    virtual int64_t in_features() const = 0;
    virtual int64_t out_features() const = 0;
    // y [T, out] = x [T, in] @ W^T (+ bias); x and y in the backend's act dtype.
    virtual void forward(Backend& be, const Tensor& x, Tensor& y) const = 0;
    // The weight as fp32 [out, in], exactly as the format defines it (the reference path for tests).
    virtual std::vector<float> dequantize() const = 0;
    virtual std::string format() const = 0;
    // Bytes of weight data (and scales / zeros) one forward reads: the roofline's numerator.
    virtual size_t weight_bytes() const = 0;
    // ys[i] [T, w_i] = consecutive column ranges of y = x W^T (+ bias), sum w_i = out: the parts of a stacked
    // projection group for several tokens, each contiguous. The default runs forward() into scratch and copies
    // the columns out (cheap for the few rows of a verify step); plain weights and the prefill path of the
    // quantized ones run one matmul per row range of W instead (no [T, out] scratch for long prompts).
    virtual void forward_split(Backend& be, const Tensor& x, std::span<Tensor> ys) const;
    // The [out, in] weight when it is stored plain on the backend with no bias, else null: lets a backend fold
    // a small projection into a fused op (Backend::gdn_core_ba); the math stays the format's own.
    virtual const Tensor* plain_weight() const { return nullptr; }
    // For a stacked [gate; up] weight (out = 2 I, gate rows first): h [T, I] act = silu(x Wg^T) * (x Wu^T).
    // Where offers_glu(T) the implementation does it in one pass, the two halves never stored (the quantized
    // one-pass kernel pairs their tiles, src/kernels/cuda/quant.h), with the same values as forward_split into
    // g, u and Backend::silu_mul, which is what the default forward_glu runs.
    virtual bool offers_glu(int64_t /*rows*/) const { return false; }
    virtual void forward_glu(Backend& be, const Tensor& x, Tensor& h) const;
    // The whole MLP block for a stacked [gate; up] weight: out [T, D] = down (silu(x Wg^T) * (x Wu^T)). Where
    // offers_mlp(T, down) the implementation runs it as one pass over both weights (the CUDA FP8 one-row kernel
    // streams down's weights while gate | up finishes, src/kernels/cuda/quant.h mlp_fp8); the default is
    // forward_glu into scratch, then down.forward. Same values up to fp32 summation order.
    virtual bool offers_mlp(int64_t /*rows*/, const Linear& /*down*/) const { return false; }
    virtual void forward_mlp(Backend& be, const Tensor& x, const Linear& down, Tensor& out) const;
    // The residual add + RMSNorm in front of the MLP block and the block itself: res [T, D] += y [T, D], then
    // out [T, D] = MLP(rmsnorm(res) * norm_w) (Backend::add_rmsnorm's math; out may be y). Where
    // offers_norm_mlp(T, down) one pass (the CUDA FP8 one-row kernel normalises x itself, so no kernel sits
    // between the mixer's projection and the block's weight stream); the default is add_rmsnorm into scratch,
    // then forward_mlp. Same values up to fp32 summation order.
    virtual bool offers_norm_mlp(int64_t /*rows*/, const Linear& /*down*/) const { return false; }
    virtual void forward_norm_mlp(Backend& be, Tensor& res, const Tensor& y, const Tensor& norm_w, float eps,
                                  NormKind kind, const Linear& down, Tensor& out) const;
    // forward_split whose first part goes through Backend::conv1d_silu on its way out: ys[0] [T, C] receives
    // conv1d_silu(part 0) with conv_w [C, Kc] (or [C, 1, Kc]) and conv_state [Kc - 1, C] (advanced by the T
    // rows); the raw part 0 is never stored where offers_conv(T) (the quantized one-row kernel runs each
    // column's conv step as it stores it, src/kernels/cuda/quant.h QmmParts::conv). Same values as the
    // default, forward_split into scratch then conv1d_silu.
    virtual bool offers_conv(int64_t /*rows*/, const Tensor& /*conv_w*/, const Tensor& /*conv_state*/) const {
        return false;
    }
    virtual void forward_split_conv(Backend& be, const Tensor& x, std::span<Tensor> ys, const Tensor& conv_w,
                                    Tensor& conv_state) const;
    // This weight is read right after the next latency-bound op: hands its device bytes to
    // Backend::l2_prefetch (a hint; results unchanged). Default: nothing.
    virtual void prefetch(Backend& /*be*/) const {}
};

// Builds the Linear stored at `prefix` ("model.layers.0.mlp.down_proj"): `prefix.weight` (+ `.bias`) or the
// quantized tensors. Throws Error naming the tensor and reason for an unsupported or inconsistent set.
std::unique_ptr<Linear> load_linear(Backend& be, const Checkpoint& ckpt, const std::string& prefix,
                                    const QuantConfig& qc, bool allow_bias = true);

// A plain-weight Linear from an already uploaded tensor (used for tied embeddings as lm_head).
std::unique_ptr<Linear> make_dense_linear(Tensor weight, Tensor bias, std::vector<float> host_ref);

}  // namespace grimoire
