#include "backend/cpu/cpu_backend.h"

#include <cstring>
#include <new>
#include <string>

#include "core/threadpool.h"
#include "kernels/cpu/kernels.h"
#include "sample/sampler.h"

namespace grimoire {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMinChunk = size_t{64} << 20;  // scratch grows by at least 64 MiB

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
void* aligned_new(size_t bytes) { return ::operator new(round_up(std::max<size_t>(bytes, 1)), std::align_val_t{kAlign}); }
void aligned_delete(void* p) { ::operator delete(p, std::align_val_t{kAlign}); }

void expect_f32(const Tensor& t, const char* op, const char* arg) {
    GRIMOIRE_CHECK(t.dtype == DType::F32, std::string(op) + ": " + arg + " must be F32");
    GRIMOIRE_CHECK(t.device == Device::CPU, std::string(op) + ": " + arg + " is not a CPU tensor");
}
void expect_numel(const Tensor& t, int64_t n, const char* op, const char* arg) {
    GRIMOIRE_CHECK(t.numel() == n, std::string(op) + ": " + arg + " has " + std::to_string(t.numel()) +
                                       " elements, expected " + std::to_string(n));
}

// A small parameter vector (norm weight, bias, A_log...) as fp32: the tensor itself when already F32,
// else converted into `tmp`.
const float* param_f32(const Tensor& t, std::vector<float>& tmp) {
    if (t.dtype == DType::F32) return t.ptr<const float>();
    tmp.resize(static_cast<size_t>(t.numel()));
    convert_to_f32(t.dtype, t.data, tmp.data(), tmp.size());
    return tmp.data();
}

}  // namespace

CpuBackend::~CpuBackend() {
    for (auto& [p, n] : weights_) aligned_delete(p);
    for (auto& [p, n] : state_) aligned_delete(p);
    for (auto& c : chunks_) aligned_delete(c.data);
}

std::string CpuBackend::name() const { return "cpu (" + std::to_string(cpu_threads()) + " threads)"; }

MemoryStats CpuBackend::memory() const { return stats_; }

void* CpuBackend::allocate(size_t bytes, size_t& counter) {
    void* p = aligned_new(bytes);
    counter += bytes;
    return p;
}

Tensor CpuBackend::upload(const TensorInfo& t, DType as) {
    if (t.shape.size() > static_cast<size_t>(Tensor::kMaxDims))
        throw Error(t.file + ": tensor '" + t.name + "' has " + std::to_string(t.shape.size()) +
                    " dimensions (at most 4 supported)");
    if (as != t.dtype && as != DType::F32 && as != DType::BF16 && as != DType::F16)
        throw Error(t.file + ": tensor '" + t.name + "': cannot upload as " + std::string(dtype_name(as)));
    Tensor out;
    out.dtype = as;
    out.device = Device::CPU;
    out.ndim = static_cast<int>(t.shape.size());
    for (int i = 0; i < out.ndim; ++i) out.shape[static_cast<size_t>(i)] = t.shape[static_cast<size_t>(i)];
    const size_t bytes = out.nbytes();
    out.data = allocate(bytes, stats_.weights);
    weights_[out.data] = bytes;
    if (as == t.dtype) {
        std::memcpy(out.data, t.data, bytes);
        return out;
    }
    const size_t n = static_cast<size_t>(t.numel());
    if (as == DType::F32) {
        convert_to_f32(t.dtype, t.data, out.ptr<float>(), n);
        return out;
    }
    std::vector<float> tmp(n);
    convert_to_f32(t.dtype, t.data, tmp.data(), n);
    auto* dst = out.ptr<uint16_t>();
    for (size_t i = 0; i < n; ++i) dst[i] = as == DType::BF16 ? f32_to_bf16(tmp[i]) : f32_to_f16(tmp[i]);
    return out;
}

Tensor CpuBackend::upload_raw(const void* host, DType dtype, std::initializer_list<int64_t> shape) {
    Tensor t(nullptr, dtype, Device::CPU, shape);
    t.data = allocate(t.nbytes(), stats_.weights);
    weights_[t.data] = t.nbytes();
    if (t.nbytes()) std::memcpy(t.data, host, t.nbytes());
    return t;
}

Tensor CpuBackend::alloc_persistent(DType dtype, std::initializer_list<int64_t> shape) {
    Tensor t(nullptr, dtype, Device::CPU, shape);
    t.data = allocate(t.nbytes(), stats_.state);
    state_[t.data] = t.nbytes();
    std::memset(t.data, 0, t.nbytes());
    return t;
}

void CpuBackend::free_persistent(Tensor& t) {
    if (!t.data) return;
    if (auto it = state_.find(t.data); it != state_.end()) {
        stats_.state -= it->second;
        state_.erase(it);
    } else if (auto w = weights_.find(t.data); w != weights_.end()) {
        stats_.weights -= w->second;
        weights_.erase(w);
    } else {
        GRIMOIRE_CHECK(false, "free_persistent: tensor was not allocated by this backend");
    }
    aligned_delete(t.data);
    t = Tensor{};
}

Tensor CpuBackend::scratch(DType dtype, std::initializer_list<int64_t> shape) {
    Tensor t(nullptr, dtype, Device::CPU, shape);
    const size_t bytes = round_up(std::max<size_t>(t.nbytes(), 1));
    for (auto& c : chunks_) {
        if (c.size - c.used >= bytes) {
            t.data = static_cast<char*>(c.data) + c.used;
            c.used += bytes;
            return t;
        }
    }
    Chunk c;
    c.size = std::max(kMinChunk, bytes);
    c.data = aligned_new(c.size);
    c.used = bytes;
    stats_.scratch += c.size;
    chunks_.push_back(c);
    t.data = c.data;
    return t;
}

void CpuBackend::reset_scratch() {
    if (chunks_.size() > 1) {
        // Nothing is live after a reset, so the chunks can be merged: the next forward fits in one.
        size_t total = 0;
        for (auto& c : chunks_) {
            total += c.size;
            aligned_delete(c.data);
        }
        chunks_.assign(1, Chunk{aligned_new(total), total, 0});
    }
    for (auto& c : chunks_) c.used = 0;
}

void CpuBackend::to_host(const Tensor& t, void* host) const {
    if (t.nbytes()) std::memcpy(host, t.data, t.nbytes());
}

void CpuBackend::from_host(Tensor& t, const void* host) {
    if (t.nbytes()) std::memcpy(t.data, host, t.nbytes());
}

void CpuBackend::zero(Tensor& t) {
    if (t.nbytes()) std::memset(t.data, 0, t.nbytes());
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
    GRIMOIRE_CHECK(src.dtype == dst.dtype && src.numel() == dst.numel(), "copy: dtype or element count differs");
    if (src.nbytes() && src.data != dst.data) std::memmove(dst.data, src.data, src.nbytes());
}

// ---- ops ----

void CpuBackend::embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
    GRIMOIRE_CHECK(ids.dtype == DType::I32, "embedding: ids must be I32");
    expect_f32(out, "embedding", "out");
    const int64_t T = ids.numel(), H = table.cols();
    expect_numel(out, T * H, "embedding", "out");
    cpu::embedding(table.data, table.dtype, table.rows(), H, ids.ptr<const int32_t>(), T, out.ptr<float>());
}

void CpuBackend::rmsnorm(const Tensor& x, const Tensor& w, float eps, NormKind kind, Tensor& out) {
    expect_f32(x, "rmsnorm", "x");
    expect_f32(out, "rmsnorm", "out");
    const int64_t D = x.cols();
    expect_numel(w, D, "rmsnorm", "w");
    expect_numel(out, x.numel(), "rmsnorm", "out");
    std::vector<float> tmp;
    cpu::rmsnorm(x.ptr<const float>(), param_f32(w, tmp), x.rows(), D, eps, kind, out.ptr<float>());
}

void CpuBackend::rmsnorm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& out) {
    expect_f32(x, "rmsnorm_gated", "x");
    expect_f32(z, "rmsnorm_gated", "z");
    expect_f32(out, "rmsnorm_gated", "out");
    const int64_t D = x.cols();
    expect_numel(w, D, "rmsnorm_gated", "w");
    expect_numel(z, x.numel(), "rmsnorm_gated", "z");
    expect_numel(out, x.numel(), "rmsnorm_gated", "out");
    std::vector<float> tmp;
    cpu::rmsnorm_gated(x.ptr<const float>(), z.ptr<const float>(), param_f32(w, tmp), x.rows(), D, eps,
                       out.ptr<float>());
}

void CpuBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
    expect_f32(a, "add", "a");
    expect_f32(b, "add", "b");
    expect_f32(out, "add", "out");
    expect_numel(b, a.numel(), "add", "b");
    expect_numel(out, a.numel(), "add", "out");
    cpu::add(a.ptr<const float>(), b.ptr<const float>(), out.ptr<float>(), a.numel());
}

void CpuBackend::scale(Tensor& x, float s) {
    expect_f32(x, "scale", "x");
    cpu::scale(x.ptr<float>(), x.numel(), s);
}

void CpuBackend::mul_sigmoid(Tensor& x, const Tensor& gate) {
    expect_f32(x, "mul_sigmoid", "x");
    expect_f32(gate, "mul_sigmoid", "gate");
    expect_numel(gate, x.numel(), "mul_sigmoid", "gate");
    cpu::mul_sigmoid(x.ptr<float>(), gate.ptr<const float>(), x.numel());
}

void CpuBackend::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
    expect_f32(gate, "silu_mul", "gate");
    expect_f32(up, "silu_mul", "up");
    expect_f32(out, "silu_mul", "out");
    expect_numel(up, gate.numel(), "silu_mul", "up");
    expect_numel(out, gate.numel(), "silu_mul", "out");
    cpu::silu_mul(gate.ptr<const float>(), up.ptr<const float>(), out.ptr<float>(), gate.numel());
}

void CpuBackend::copy_cols(const Tensor& src, int64_t c0, Tensor& out) {
    GRIMOIRE_CHECK(src.dtype == out.dtype, "copy_cols: dtype differs");
    const int64_t n = out.cols();
    GRIMOIRE_CHECK(out.rows() == src.rows() && c0 >= 0 && c0 + n <= src.cols(), "copy_cols: shapes do not fit");
    cpu::copy_cols(src.data, src.rows(), src.cols(), c0, n, dtype_size(src.dtype), out.data);
}

void CpuBackend::rope(Tensor& x, const Tensor& positions, const RopeParams& p) {
    expect_f32(x, "rope", "x");
    GRIMOIRE_CHECK(x.ndim == 3, "rope: x must be [T, H, D]");
    GRIMOIRE_CHECK(positions.dtype == DType::I32, "rope: positions must be I32");
    expect_numel(positions, x.dim(0), "rope", "positions");
    cpu::rope(x.ptr<float>(), x.dim(0), x.dim(1), x.dim(2), positions.ptr<const int32_t>(), p);
}

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                           int64_t n_past, float scale, Tensor& out) {
    for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k, &v, &out}) expect_f32(*t, "attention", "q/k/v/out");
    expect_f32(k_cache, "attention", "k_cache");
    expect_f32(v_cache, "attention", "v_cache");
    GRIMOIRE_CHECK(k_cache.ndim == 3, "attention: k_cache must be [max_ctx, Hkv, D]");
    const int64_t max_ctx = k_cache.dim(0), Hkv = k_cache.dim(1), D = k_cache.dim(2), T = q.dim(0);
    expect_numel(v_cache, k_cache.numel(), "attention", "v_cache");
    GRIMOIRE_CHECK(T > 0 && q.numel() % (T * D) == 0, "attention: q does not match the cache head_dim");
    const int64_t Hq = q.numel() / (T * D);
    expect_numel(k, T * Hkv * D, "attention", "k");
    expect_numel(v, T * Hkv * D, "attention", "v");
    expect_numel(out, q.numel(), "attention", "out");
    cpu::attention(q.ptr<const float>(), k.ptr<const float>(), v.ptr<const float>(), k_cache.ptr<float>(),
                   v_cache.ptr<float>(), T, Hq, Hkv, D, max_ctx, n_past, scale, out.ptr<float>());
}

void CpuBackend::conv1d_silu(const Tensor& x, const Tensor& w, Tensor& state, Tensor& out) {
    expect_f32(x, "conv1d_silu", "x");
    expect_f32(state, "conv1d_silu", "state");
    expect_f32(out, "conv1d_silu", "out");
    const int64_t T = x.rows(), C = x.cols(), K = w.cols();
    expect_numel(w, C * K, "conv1d_silu", "w");
    expect_numel(state, (K - 1) * C, "conv1d_silu", "state");
    expect_numel(out, T * C, "conv1d_silu", "out");
    std::vector<float> tmp;
    cpu::conv1d_silu(x.ptr<const float>(), param_f32(w, tmp), state.ptr<float>(), T, C, K, out.ptr<float>());
}

void CpuBackend::gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                                  const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, Tensor& state,
                                  Tensor& out) {
    for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k, &v, &a, &b, &state, &out}) expect_f32(*t, "gated_delta_rule", "q/k/v/a/b/state/out");
    GRIMOIRE_CHECK(q.ndim == 3 && v.ndim == 3, "gated_delta_rule: q must be [T, Hk, dk] and v [T, Hv, dv]");
    const cpu::GdnShape s{q.dim(0), q.dim(1), v.dim(1), q.dim(2), v.dim(2)};
    expect_numel(k, q.numel(), "gated_delta_rule", "k");
    GRIMOIRE_CHECK(v.dim(0) == s.T, "gated_delta_rule: q and v disagree on T");
    expect_numel(a, s.T * s.Hv, "gated_delta_rule", "a");
    expect_numel(b, s.T * s.Hv, "gated_delta_rule", "b");
    expect_numel(A_log, s.Hv, "gated_delta_rule", "A_log");
    expect_numel(dt_bias, s.Hv, "gated_delta_rule", "dt_bias");
    expect_numel(state, s.Hv * s.dk * s.dv, "gated_delta_rule", "state");
    expect_numel(out, v.numel(), "gated_delta_rule", "out");
    std::vector<float> ta, td;
    cpu::gated_delta_rule(q.ptr<const float>(), k.ptr<const float>(), v.ptr<const float>(), a.ptr<const float>(),
                          b.ptr<const float>(), param_f32(A_log, ta), param_f32(dt_bias, td), state.ptr<float>(), s,
                          out.ptr<float>());
}

void CpuBackend::matmul(const Tensor& x, const Tensor& w, Tensor& out) {
    expect_f32(x, "matmul", "x");
    expect_f32(out, "matmul", "out");
    GRIMOIRE_CHECK(w.ndim == 2, "matmul: w must be [N, K]");
    const int64_t T = x.rows(), K = x.cols(), N = w.dim(0);
    GRIMOIRE_CHECK(w.dim(1) == K, "matmul: x has " + std::to_string(K) + " columns, w has " + std::to_string(w.dim(1)));
    expect_numel(out, T * N, "matmul", "out");
    cpu::matmul(x.ptr<const float>(), w.data, w.dtype, T, K, N, out.ptr<float>());
}

void CpuBackend::argmax(const Tensor& logits, Tensor& out) {
    expect_f32(logits, "argmax", "logits");
    const int64_t R = logits.rows(), V = logits.cols();
    if (out.dtype != DType::I32 || out.numel() != R) throw Error("cpu argmax: out must be I32 [rows of logits]");
    for (int64_t r = 0; r < R; ++r) out.ptr<int32_t>()[r] = grimoire::argmax(logits.ptr<float>() + r * V, V);
}

void CpuBackend::add_bias(Tensor& x, const Tensor& bias) {
    expect_f32(x, "add_bias", "x");
    const int64_t N = x.cols();
    expect_numel(bias, N, "add_bias", "bias");
    std::vector<float> tmp;
    cpu::add_bias(x.ptr<float>(), param_f32(bias, tmp), x.rows(), N);
}

// ---- fused ops: the unfused sequences themselves ----

void CpuBackend::add_rmsnorm(Tensor& x, const Tensor& y, const Tensor& w, float eps, NormKind kind, Tensor& out) {
    add(x, y, x);
    rmsnorm(x, w, eps, kind, out);
}

void CpuBackend::gated_attention_core(const Tensor& qg, Tensor& k, const Tensor& v, const Tensor& q_norm,
                                      const Tensor& k_norm, float eps, const Tensor& positions,
                                      const RopeParams& rope_p, Tensor& k_cache, Tensor& v_cache, int64_t n_past,
                                      float scale, Tensor& out) {
    gated_attention_core_unfused(qg, k, v, q_norm, k_norm, eps, positions, rope_p, k_cache, v_cache, n_past, scale,
                                 out);
}

void CpuBackend::gdn_core(const Tensor& mixed, const Tensor& conv_w, Tensor& conv_state, const Tensor& a,
                          const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, Tensor& state, const Tensor& z,
                          const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out) {
    gdn_core_unfused(mixed, conv_w, conv_state, a, b, A_log, dt_bias, state, z, norm_w, eps, n_k_heads, out);
}

}  // namespace grimoire
