// CpuBackend: the reference (oracle) implementation of the Backend seam. Everything lives in host memory.
//
// Decisions the Backend interface leaves open (other backends may differ, models must not rely on them):
//  * upload(t, as): `as` may be F32, BF16 or F16 (or t.dtype, which keeps the bytes). matmul reads BF16/F16
//    weights directly (converted per tile), so keeping BF16 halves the memory at no speed cost for decode.
//    1-D parameters (norm weights, biases, A_log, dt_bias, conv weights) are expected as F32; ops accept
//    other float dtypes there too and convert them on the fly.
//  * scratch() memory is NOT zeroed; it is 64-byte aligned. The arena grows by whole chunks (existing
//    allocations never move); reset_scratch() merges the chunks into one so later forwards see one chunk.
//  * attention(): q/out may be [T, Hq, D] or [T, Hq*D] and k/v [T, Hkv, D] or [T, Hkv*D]; Hkv and D come from
//    the cache shape [max_ctx, Hkv, D].
//  * conv1d_silu(): w may be [C, K] or the checkpoint's [C, 1, K].
//  * memory(): weights = upload + upload_raw bytes, state = live alloc_persistent bytes, scratch = arena
//    capacity.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace grimoire {

class CpuBackend final : public Backend {
public:
    CpuBackend() = default;
    ~CpuBackend() override;

    Device device() const override { return Device::CPU; }
    std::string name() const override;
    DType act_dtype() const override { return DType::F32; }
    MemoryStats memory() const override;

    Tensor upload(const TensorInfo& t, DType as) override;
    Tensor upload_raw(const void* host, DType dtype, std::initializer_list<int64_t> shape) override;
    Tensor alloc_persistent(DType dtype, std::initializer_list<int64_t> shape) override;
    void free_persistent(Tensor& t) override;
    Tensor scratch(DType dtype, std::initializer_list<int64_t> shape) override;
    void reset_scratch() override;
    void to_host(const Tensor& t, void* host) const override;
    void from_host(Tensor& t, const void* host) override;
    void zero(Tensor& t) override;
    void copy(const Tensor& src, Tensor& dst) override;

    void embedding(const Tensor& table, const Tensor& ids, Tensor& out) override;
    void rmsnorm(const Tensor& x, const Tensor& w, float eps, NormKind kind, Tensor& out) override;
    void rmsnorm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& out) override;
    void add(const Tensor& a, const Tensor& b, Tensor& out) override;
    void scale(Tensor& x, float s) override;
    void mul_sigmoid(Tensor& x, const Tensor& gate) override;
    void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
    void copy_cols(const Tensor& src, int64_t c0, Tensor& out) override;
    void rope(Tensor& x, const Tensor& positions, const RopeParams& p) override;
    void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                   int64_t n_past, float scale, Tensor& out) override;
    void conv1d_silu(const Tensor& x, const Tensor& w, Tensor& state, Tensor& out) override;
    void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                          const Tensor& A_log, const Tensor& dt_bias, Tensor& state, Tensor& out) override;
    void matmul(const Tensor& x, const Tensor& w, Tensor& out) override;
    void add_bias(Tensor& x, const Tensor& bias) override;
    void argmax(const Tensor& logits, Tensor& out) override;

    // ---- fused ops: exactly the unfused sequences of backend.h (the oracle for the CUDA kernels) ----
    void add_rmsnorm(Tensor& x, const Tensor& y, const Tensor& w, float eps, NormKind kind, Tensor& out) override;
    void gated_attention_core(const Tensor& qg, Tensor& k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm,
                              float eps, const Tensor& positions, const RopeParams& rope, Tensor& k_cache,
                              Tensor& v_cache, int64_t n_past, float scale, Tensor& out) override;
    void gdn_core(const Tensor& mixed, const Tensor& conv_w, Tensor& conv_state, const Tensor& a, const Tensor& b,
                  const Tensor& A_log, const Tensor& dt_bias, Tensor& state, const Tensor& z, const Tensor& norm_w,
                  float eps, int64_t n_k_heads, Tensor& out) override;

private:
    struct Chunk {
        void* data = nullptr;
        size_t size = 0, used = 0;
    };
    void* allocate(size_t bytes, size_t& counter);

    std::map<void*, size_t> weights_, state_;  // live persistent allocations -> bytes
    std::vector<Chunk> chunks_;                // scratch arena
    MemoryStats stats_;
};

}  // namespace grimoire
