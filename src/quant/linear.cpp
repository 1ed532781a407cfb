// load_linear() and the plain-weight (BF16/F16/F32) Linear. Quantized formats live in their own files and are
// found through the probe list in quant/formats.cpp.
#include "quant/linear.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "quant/formats.h"

namespace grimoire {

namespace {

bool is_plain_float(DType t) {
    return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

class DenseLinear final : public Linear {
  public:
    // `be` may be null when `host_ref` holds the weight (make_dense_linear); dequantize() then returns it.
    DenseLinear(const Backend* be, Tensor w, Tensor bias, std::vector<float> host_ref)
        : be_(be), w_(w), bias_(bias), host_ref_(std::move(host_ref)) {
        GRIMOIRE_CHECK(w_.ndim == 2, "dense weight must be [out, in]");
        GRIMOIRE_CHECK(!bias_.data || bias_.numel() == w_.dim(0), "bias must be [out]");
    }
    int64_t in_features() const override { return w_.dim(1); }
    int64_t out_features() const override { return w_.dim(0); }

    void forward(Backend& be, const Tensor& x, Tensor& y) const override {  // x [T, in], y [T, out] act
        be.matmul(x, w_, y);
        if (bias_.data) be.add_bias(y, bias_);
    }

    void prefetch(Backend& be) const override { be.l2_prefetch(w_.data, w_.nbytes()); }

    std::vector<float> dequantize() const override {
        if (!host_ref_.empty()) return host_ref_;
        std::vector<uint8_t> raw(w_.nbytes());
        if (be_) {
            be_->to_host(w_, raw.data());
        } else {
            GRIMOIRE_CHECK(w_.device == Device::CPU, "dense weight without host copy or backend");
            std::memcpy(raw.data(), w_.data, raw.size());
        }
        std::vector<float> out(static_cast<size_t>(w_.numel()));
        convert_to_f32(w_.dtype, raw.data(), out.data(), out.size());
        return out;
    }

    void forward_split(Backend& be, const Tensor& x, std::span<Tensor> ys) const override {
        const int64_t K = w_.dim(1);
        int64_t r0 = 0;
        if (!bias_.data) {
            for (const Tensor& y : ys) r0 += y.cols();
            GRIMOIRE_CHECK(r0 == w_.dim(0) && K == x.cols(), "forward_split: parts do not cover the weight");
            be.matmul_split(x, w_, ys.data(), ys.size());
            return;
        }
        for (Tensor& y : ys) {
            const int64_t n = y.cols();
            const Tensor rows = w_.row_slice(r0, n);  // [n, K]: W's rows are contiguous
            be.matmul(x, rows, y);
            if (bias_.data) be.add_bias(y, bias_.view({bias_.numel(), 1}).row_slice(r0, n).view({n}));
            r0 += n;
        }
        GRIMOIRE_CHECK(r0 == w_.dim(0) && K == x.cols(), "forward_split: parts do not cover the weight");
    }

    std::string format() const override { return std::string(dtype_name(w_.dtype)); }
    size_t weight_bytes() const override { return w_.nbytes() + (bias_.data ? bias_.nbytes() : 0); }
    const Tensor* plain_weight() const override { return bias_.data ? nullptr : &w_; }

  private:
    const Backend* be_;
    Tensor w_;                     // [out, in] F32/BF16/F16
    Tensor bias_;                  // [out] F32, or empty
    std::vector<float> host_ref_;  // [out, in] f32, optional
};

}  // namespace

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

QuantConfig QuantConfig::from_config(const ConfigReader& cfg) {
    QuantConfig qc;
    // compressed-tensors checkpoints from older llm-compressor versions call it compression_config.
    for (const char* key : {"quantization_config", "compression_config"}) {
        if (!cfg.has(key)) continue;
        const ConfigReader q = cfg.sub(key);
        qc.raw = q.json();
        qc.method = q.get_or<std::string>("quant_method", "");
        std::transform(qc.method.begin(), qc.method.end(), qc.method.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        break;
    }
    return qc;
}

DType dense_weight_dtype(const Backend& be, DType stored) {
    return be.act_dtype() == DType::F32 && is_plain_float(stored) ? stored : be.act_dtype();
}

std::unique_ptr<Linear> probe_dense(Backend& be,
                                    const Checkpoint& ckpt,
                                    const std::string& prefix,
                                    const QuantConfig& /*qc*/,
                                    bool allow_bias) {
    const TensorInfo* w = ckpt.find(prefix + ".weight");
    if (!w) return nullptr;
    if (w->shape.size() != 2)
        throw Error(w->file + ": tensor '" + w->name + "': expected a 2-D [out, in] weight, found shape " +
                    shape_str(w->shape));
    if (!is_plain_float(w->dtype) && w->dtype != DType::F64)
        throw Error(w->file + ": tensor '" + w->name + "': dtype " + std::string(dtype_name(w->dtype)) +
                    " is not a plain weight and no quantization format claimed it");
    Tensor wt = be.upload(*w, dense_weight_dtype(be, w->dtype));
    Tensor bt;
    if (const TensorInfo* b = ckpt.find(prefix + ".bias")) {
        if (!allow_bias)
            throw Error(b->file + ": tensor '" + b->name +
                        "': this layer takes no bias (the config says so)");
        if (b->shape != std::vector<int64_t>{w->shape[0]})
            throw Error(b->file + ": tensor '" + b->name + "': expected shape " + shape_str({w->shape[0]}) +
                        ", found " + shape_str(b->shape));
        bt = be.upload(*b, DType::F32);
    }
    return std::make_unique<DenseLinear>(&be, wt, bt, std::vector<float>{});
}

std::unique_ptr<Linear> load_linear(
    Backend& be, const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& qc, bool allow_bias) {
    for (LinearProbe probe : linear_format_probes())
        if (auto lin = probe(be, ckpt, prefix, qc, allow_bias)) return lin;
    throw Error(ckpt.dir() + ": tensor '" + prefix +
                ".weight' not found (nor a quantized weight set under '" + prefix + "')");
}

void Linear::forward_split(Backend& be, const Tensor& x, std::span<Tensor> ys) const {
    Tensor y = be.scratch(be.act_dtype(), {x.rows(), out_features()});  // [T, out] act
    forward(be, x, y);
    int64_t c0 = 0;
    for (Tensor& part : ys) {
        be.copy_cols(y, c0, part);
        c0 += part.cols();
    }
    GRIMOIRE_CHECK(c0 == out_features(), "forward_split: parts do not cover the output");
}

void Linear::forward_glu(Backend& be, const Tensor& x, Tensor& h) const {
    const int64_t I = out_features() / 2;
    GRIMOIRE_CHECK(out_features() == 2 * I && h.rows() == x.rows() && h.cols() == I,
                   "forward_glu: h must be [T, out / 2] of a stacked gate | up weight");
    Tensor parts[2] = {be.scratch(be.act_dtype(), {x.rows(), I}), be.scratch(be.act_dtype(), {x.rows(), I})};
    forward_split(be, x, parts);
    be.silu_mul(parts[0], parts[1], h);
}

void Linear::forward_mlp(Backend& be, const Tensor& x, const Linear& down, Tensor& out) const {
    Tensor h = be.scratch(be.act_dtype(), {x.rows(), out_features() / 2});  // [T, I] act
    forward_glu(be, x, h);
    down.forward(be, h, out);
}

void Linear::forward_norm_mlp(Backend& be, Tensor& res, const Tensor& y, const Tensor& norm_w, float eps,
                              NormKind kind, const Linear& down, Tensor& out) const {
    Tensor h = be.scratch(be.act_dtype(), {res.rows(), res.cols()});  // [T, D] act
    be.linear_follows();
    be.add_rmsnorm(res, y, norm_w, eps, kind, h);
    forward_mlp(be, h, down, out);
}

void Linear::forward_split_conv(Backend& be, const Tensor& x, std::span<Tensor> ys, const Tensor& conv_w,
                                Tensor& conv_state) const {
    GRIMOIRE_CHECK(!ys.empty(), "forward_split_conv: no parts");
    std::vector<Tensor> parts(ys.begin(), ys.end());
    parts[0] = be.scratch(be.act_dtype(), {x.rows(), ys[0].cols()});
    forward_split(be, x, parts);
    be.conv1d_silu(parts[0], conv_w, conv_state, ys[0]);
}

std::unique_ptr<Linear> make_dense_linear(Tensor weight, Tensor bias, std::vector<float> host_ref) {
    return std::make_unique<DenseLinear>(nullptr, weight, bias, std::move(host_ref));
}

std::unique_ptr<Linear> make_dense_linear(const Backend& be, Tensor weight, Tensor bias) {
    return std::make_unique<DenseLinear>(&be, weight, bias, std::vector<float>{});
}

}  // namespace grimoire
