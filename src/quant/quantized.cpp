// The INT4 and FP8 Linear implementations (canonical layouts, CPU oracle kernels) and the readers' helpers.
#include "quant/quantized.h"

#include <algorithm>
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

std::vector<const TensorInfo*> find_bias(const Checkpoint& ckpt, const std::string& prefix, int64_t N,
                                         bool allow_bias) {
    const TensorInfo* b = ckpt.find(prefix + ".bias");
    if (!b) return {};
    if (!allow_bias) fail(*b, "this layer takes no bias (the config says so)");
    expect_shape(*b, {N});
    return {b};
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
    // The codes are packed two a byte (Int4Weights' layout) and the one-a-byte copy freed.
    Int4Linear(Int4Host w, Tensor bias, std::string fmt, size_t bytes)
        : packed_(cpu::pack_int4(w.q.data(), w.N, w.K)), w_(std::move(w)), bias_(bias), fmt_(std::move(fmt)),
          bytes_(bytes) {
        std::vector<uint8_t>().swap(w_.q);
    }
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
        return {packed_.data(), w_.zeros.data(), w_.scales.data(), w_.g_idx.data(), w_.N, w_.K, w_.G};
    }
    std::vector<uint8_t> packed_;  // [N, int4_row_bytes(K)] u8
    Int4Host w_;                   // zeros, scales, g_idx, shapes (q emptied)
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

// ---- reading and stacking the canonical host form ----

namespace grimoire {

using namespace quant_detail;

QuantHost quant_detail::host_of(Int4Host w, std::vector<const TensorInfo*> bias, std::string format,
                                size_t stored_bytes) {
    return QuantHost{std::move(w), std::nullopt, std::move(bias), std::move(format), stored_bytes};
}

QuantHost quant_detail::host_of(Fp8Host w, std::vector<const TensorInfo*> bias, std::string format,
                                size_t stored_bytes) {
    return QuantHost{std::nullopt, std::move(w), std::move(bias), std::move(format), stored_bytes};
}

std::unique_ptr<Linear> quant_detail::linear_or_null(Backend& be, std::optional<QuantHost> h) {
    return h ? make_quantized_linear(be, std::move(*h)) : nullptr;
}

std::optional<QuantHost> read_quantized(Backend& be, const Checkpoint& ckpt, const std::string& prefix,
                                        const QuantConfig& qc, bool allow_bias) {
    // The order of the probes in quant/formats.cpp: GPTQ-family, compressed-tensors, FP8.
    for (auto reader : {read_gptq, read_compressed_tensors, read_fp8})
        if (std::optional<QuantHost> h = reader(be, ckpt, prefix, qc, allow_bias)) return h;
    return std::nullopt;
}

namespace {

bool int4_symmetric(const Int4Host& h) {
    return std::all_of(h.zeros.begin(), h.zeros.end(), [](int32_t z) { return z == 8; });
}

// One scale per output row over all of K (per-channel; per-tensor, or one block covering every row, is the same
// scale on every row).
bool fp8_rowwise(const Fp8Host& h) { return h.bk >= h.K && (h.bn == 1 || h.bn >= h.N); }

}  // namespace

bool can_stack(const QuantHost& prev, const QuantHost& next) {
    if (prev.bias.empty() != next.bias.empty() || prev.K() != next.K()) return false;
    if (prev.int4 && next.int4) {
        const Int4Host &a = *prev.int4, &b = *next.int4;
        if (a.q.empty() != b.q.empty()) return false;  // random-weight parts stack only with their kind
        return a.G == b.G && a.g_idx == b.g_idx && int4_symmetric(a) == int4_symmetric(b);
    }
    if (prev.fp8 && next.fp8) {
        const Fp8Host &a = *prev.fp8, &b = *next.fp8;
        if (a.w.empty() != b.w.empty()) return false;
        if (fp8_rowwise(a) && fp8_rowwise(b)) return true;
        // Blocks: next's scale rows start a new block row only when prev's N fills whole blocks.
        return a.bn == b.bn && a.bk == b.bk && a.N % a.bn == 0;
    }
    return false;
}

QuantHost stack_quantized(std::vector<QuantHost> parts) {
    GRIMOIRE_CHECK(!parts.empty(), "stack_quantized: no parts");
    if (parts.size() == 1) return std::move(parts[0]);
    QuantHost out;
    out.format = parts[0].format + " (" + std::to_string(parts.size()) + " stacked)";
    for (size_t i = 0; i < parts.size(); ++i) {
        if (i) GRIMOIRE_CHECK(can_stack(parts[i - 1], parts[i]), "stack_quantized: parts do not stack");
        out.stored_bytes += parts[i].stored_bytes;
        out.bias.insert(out.bias.end(), parts[i].bias.begin(), parts[i].bias.end());
    }
    if (parts[0].int4) {
        Int4Host s;
        s.K = parts[0].int4->K, s.G = parts[0].int4->G, s.g_idx = parts[0].int4->g_idx;
        for (const QuantHost& p : parts) s.N += p.int4->N;
        const bool data = !parts[0].int4->q.empty();
        if (data) {
            s.zeros.resize(static_cast<size_t>(s.G * s.N));
            s.scales.resize(s.zeros.size());
        }
        int64_t n0 = 0;
        for (QuantHost& p : parts) {
            const Int4Host& h = *p.int4;
            if (data) {
                s.q.insert(s.q.end(), h.q.begin(), h.q.end());  // [N, K] rows append
                for (int64_t g = 0; g < s.G; ++g) {             // [G, N]: the part's columns of each group row
                    const size_t src = static_cast<size_t>(g * h.N), dst = static_cast<size_t>(g * s.N + n0);
                    std::copy_n(h.zeros.begin() + src, h.N, s.zeros.begin() + dst);
                    std::copy_n(h.scales.begin() + src, h.N, s.scales.begin() + dst);
                }
            }
            n0 += h.N;
            p.int4.reset();
        }
        out.int4 = std::move(s);
        return out;
    }
    Fp8Host s;
    s.K = parts[0].fp8->K;
    const bool rowwise = std::all_of(parts.begin(), parts.end(), [](const QuantHost& p) { return fp8_rowwise(*p.fp8); });
    s.bn = rowwise ? 1 : parts[0].fp8->bn;
    s.bk = rowwise ? s.K : parts[0].fp8->bk;
    for (QuantHost& p : parts) {
        const Fp8Host& h = *p.fp8;
        s.N += h.N;
        s.w.insert(s.w.end(), h.w.begin(), h.w.end());  // [N, K] rows append (empty for random weights)
        if (h.w.empty()) continue;
        if (rowwise && h.bn != 1)  // per-tensor: its one scale on each of its rows
            s.scales.insert(s.scales.end(), static_cast<size_t>(h.N), h.scales[0]);
        else  // per-channel rows, or whole block rows (prev's N is a multiple of bn)
            s.scales.insert(s.scales.end(), h.scales.begin(), h.scales.end());
        p.fp8.reset();
    }
    out.fp8 = std::move(s);
    return out;
}

std::unique_ptr<Linear> make_quantized_linear(Backend& be, QuantHost h) {
    Tensor bias;
    if (h.bias.size() == 1) {
        bias = be.upload(*h.bias[0], DType::F32);
    } else if (!h.bias.empty()) {
        // The parts' biases as one F32 [N] (random weights: shape only, the backend fills it).
        TensorInfo all;
        all.name = h.bias[0]->name + " (stacked with " + std::to_string(h.bias.size() - 1) + " more)";
        all.file = h.bias[0]->file;
        all.dtype = DType::F32;
        std::vector<float> host;
        for (const TensorInfo* b : h.bias) {
            const std::vector<float> v = be.random_weights() ? std::vector<float>(static_cast<size_t>(b->numel()))
                                                             : b->to_f32();
            host.insert(host.end(), v.begin(), v.end());
        }
        all.shape = {static_cast<int64_t>(host.size())};
        all.nbytes = host.size() * sizeof(float);
        if (!be.random_weights()) all.data = reinterpret_cast<const uint8_t*>(host.data());
        bias = be.upload(all, DType::F32);
    }
    if (h.int4) return make_int4_linear(be, std::move(*h.int4), bias, std::move(h.format), h.stored_bytes);
    GRIMOIRE_CHECK(h.fp8.has_value(), "make_quantized_linear: no weight");
    h.fp8->role = h.role;
    return make_fp8_linear(be, std::move(*h.fp8), bias, std::move(h.format), h.stored_bytes);
}

}  // namespace grimoire
