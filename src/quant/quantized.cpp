// The INT4 and FP8 Linear implementations (canonical layouts, CPU oracle kernels) and the readers' helpers.
#include "quant/quantized.h"

#include <cstring>

#include "core/error.h"
#include "kernels/cpu/dequant.h"
#include "quant/formats.h"

namespace grimoire {

namespace quant_detail {

void fail(const TensorInfo& t, const std::string& why) {
    throw Error(t.file + ": tensor '" + t.name + "': " + why);
}

void expect_shape(const TensorInfo& t, const std::vector<int64_t>& shape) {
    if (t.shape != shape) fail(t, "expected shape " + shape_str(shape) + ", found " + shape_str(t.shape));
}

std::vector<int32_t> read_i32(const TensorInfo& t) {
    if (t.dtype != DType::I32) fail(t, "expected dtype I32, found " + std::string(dtype_name(t.dtype)));
    std::vector<int32_t> v(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), t.data, v.size() * sizeof(int32_t));
    return v;
}

std::vector<float> read_scales(const TensorInfo& t) {
    if (t.dtype != DType::F16 && t.dtype != DType::BF16 && t.dtype != DType::F32)
        fail(t, "scales must be F16, BF16 or F32, found " + std::string(dtype_name(t.dtype)));
    return t.to_f32();
}

Tensor load_bias(Backend& be, const Checkpoint& ckpt, const std::string& prefix, int64_t N, bool allow_bias) {
    const TensorInfo* b = ckpt.find(prefix + ".bias");
    if (!b) return Tensor{};
    if (!allow_bias) fail(*b, "this layer takes no bias (the config says so)");
    expect_shape(*b, {N});
    return be.upload(*b, DType::F32);
}

}  // namespace quant_detail

namespace {

void check_cpu_f32(const Backend& be, const Tensor& x, const Tensor& y, int64_t K, int64_t N,
                   const std::string& fmt) {
    // The CUDA implementations are separate classes (make_*_linear with the backend); this one is the CPU's.
    if (be.device() != Device::CPU || x.device != Device::CPU)
        throw Error("quantized linear (" + fmt + "): built for the CPU but called on " + be.name());
    GRIMOIRE_CHECK(x.dtype == DType::F32 && y.dtype == DType::F32, "CPU activations are F32");
    GRIMOIRE_CHECK(x.cols() == K && y.cols() == N && x.rows() == y.rows(), "quantized linear shape mismatch");
}

class Int4Linear final : public Linear {
  public:
    Int4Linear(Int4Host w, Tensor bias, std::string fmt, size_t bytes)
        : w_(std::move(w)), bias_(bias), fmt_(std::move(fmt)), bytes_(bytes) {}
    int64_t in_features() const override { return w_.K; }
    int64_t out_features() const override { return w_.N; }

    void forward(Backend& be, const Tensor& x, Tensor& y) const override {  // x [T, K], y [T, N] f32
        check_cpu_f32(be, x, y, w_.K, w_.N, fmt_);
        cpu::matmul_int4(static_cast<const float*>(x.data), view(), x.rows(), static_cast<float*>(y.data));
        if (bias_.data) be.add_bias(y, bias_);
    }
    std::vector<float> dequantize() const override {
        std::vector<float> out(static_cast<size_t>(w_.N * w_.K));
        cpu::dequant_int4_rows(view(), 0, w_.N, out.data());
        return out;
    }
    std::string format() const override { return fmt_; }
    size_t weight_bytes() const override { return bytes_ + (bias_.data ? bias_.nbytes() : 0); }

  private:
    cpu::Int4Weights view() const {
        return {w_.q.data(), w_.zeros.data(), w_.scales.data(), w_.g_idx.data(), w_.N, w_.K, w_.G};
    }
    Int4Host w_;
    Tensor bias_;  // [N] F32 or empty
    std::string fmt_;
    size_t bytes_;
};

class Fp8Linear final : public Linear {
  public:
    Fp8Linear(Fp8Host w, Tensor bias, std::string fmt, size_t bytes)
        : w_(std::move(w)), bias_(bias), fmt_(std::move(fmt)), bytes_(bytes) {}
    int64_t in_features() const override { return w_.K; }
    int64_t out_features() const override { return w_.N; }

    void forward(Backend& be, const Tensor& x, Tensor& y) const override {  // x [T, K], y [T, N] f32
        check_cpu_f32(be, x, y, w_.K, w_.N, fmt_);
        cpu::matmul_fp8(static_cast<const float*>(x.data), view(), x.rows(), static_cast<float*>(y.data));
        if (bias_.data) be.add_bias(y, bias_);
    }
    std::vector<float> dequantize() const override {
        std::vector<float> out(static_cast<size_t>(w_.N * w_.K));
        cpu::dequant_fp8_rows(view(), 0, w_.N, out.data());
        return out;
    }
    std::string format() const override { return fmt_; }
    size_t weight_bytes() const override { return bytes_ + (bias_.data ? bias_.nbytes() : 0); }

  private:
    cpu::Fp8Weights view() const { return {w_.w.data(), w_.scales.data(), w_.N, w_.K, w_.bn, w_.bk}; }
    Fp8Host w_;
    Tensor bias_;  // [N] F32 or empty
    std::string fmt_;
    size_t bytes_;
};

}  // namespace

std::unique_ptr<Linear> make_int4_linear(Int4Host w, Tensor bias, std::string format, size_t stored_bytes) {
    GRIMOIRE_CHECK(static_cast<int64_t>(w.q.size()) == w.N * w.K && static_cast<int64_t>(w.g_idx.size()) == w.K &&
                   static_cast<int64_t>(w.zeros.size()) == w.G * w.N &&
                   static_cast<int64_t>(w.scales.size()) == w.G * w.N, "int4 canonical sizes");
    return std::make_unique<Int4Linear>(std::move(w), bias, std::move(format), stored_bytes);
}

std::unique_ptr<Linear> make_fp8_linear(Fp8Host w, Tensor bias, std::string format, size_t stored_bytes) {
    GRIMOIRE_CHECK(static_cast<int64_t>(w.w.size()) == w.N * w.K, "fp8 canonical sizes");
    return std::make_unique<Fp8Linear>(std::move(w), bias, std::move(format), stored_bytes);
}

std::unique_ptr<Linear> make_int4_linear(Backend& be, Int4Host w, Tensor bias, std::string format,
                                         size_t stored_bytes) {
#ifdef GRIMOIRE_HAVE_CUDA
    if (be.device() == Device::CUDA) return make_cuda_int4_linear(be, std::move(w), bias, std::move(format), stored_bytes);
#endif
    return make_int4_linear(std::move(w), bias, std::move(format), stored_bytes);
}

std::unique_ptr<Linear> make_fp8_linear(Backend& be, Fp8Host w, Tensor bias, std::string format,
                                        size_t stored_bytes) {
#ifdef GRIMOIRE_HAVE_CUDA
    if (be.device() == Device::CUDA) return make_cuda_fp8_linear(be, std::move(w), bias, std::move(format), stored_bytes);
#endif
    return make_fp8_linear(std::move(w), bias, std::move(format), stored_bytes);
}

}  // namespace grimoire
