// The backend seam: every op a model forward needs, on one device. Architectures (src/model/arch) are
// written once against this interface; CpuBackend (the oracle, src/backend/cpu) and CudaBackend
// (src/backend/cuda) implement it. Activations are in the backend's act_dtype() (F32 on the CPU).
//
// Memory: weights() are persistent; state tensors (KV, conv, recurrent) come from alloc_persistent() and are
// freed with free_persistent(); per-step activations come from scratch(), a bump arena reset by
// reset_scratch() at the start of each forward (deterministic addresses, so a captured CUDA graph replays).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace grimoire {

// Rotary embedding: inv_freq already includes the scaling (linear / llama3 / yarn) and attn_factor is
// yarn's mscale multiplied into cos and sin. rot_dim <= head_dim; dims past rot_dim pass through.
struct RopeParams {
    std::vector<float> inv_freq;  // [rot_dim / 2]
    int rot_dim = 0;
    bool neox = true;  // true: rotate_half pairs (i, i + rot_dim/2); false: GPT-J pairs (2i, 2i+1)
    float attn_factor = 1.0f;
};

enum class NormKind : uint8_t {
    PLAIN,     // y = w * x / rms(x)             (Llama, Qwen2/3)
    PLUS_ONE,  // y = (1 + w) * x / rms(x)       (Qwen3.5 / Qwen3-Next "zero-centred")
};

// Memory accounting, by purpose, in bytes (printed by inspect and the server banner).
struct MemoryStats {
    size_t weights = 0, state = 0, scratch = 0;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual Device device() const = 0;
    virtual std::string name() const = 0;
    virtual DType act_dtype() const = 0;
    virtual MemoryStats memory() const = 0;

    // ---- memory ----
    // Copies a checkpoint tensor to the device, converted to `as` (F32 or BF16; `as` == t.dtype keeps bytes).
    virtual Tensor upload(const TensorInfo& t, DType as) = 0;
    // Uploads host data (already in `dtype`) of the given shape; persistent.
    virtual Tensor upload_raw(const void* host, DType dtype, std::initializer_list<int64_t> shape) = 0;
    virtual Tensor alloc_persistent(DType dtype, std::initializer_list<int64_t> shape) = 0;  // zeroed
    virtual void free_persistent(Tensor& t) = 0;
    virtual Tensor scratch(DType dtype, std::initializer_list<int64_t> shape) = 0;
    virtual void reset_scratch() = 0;
    virtual void to_host(const Tensor& t, void* host) const = 0;  // blocking copy of t.nbytes()
    // A host buffer of at least `bytes` for a step's results on their way to the host (the logits), valid until
    // the next call: to_host into it is one DMA on the CUDA backend (page-locked), where a copy into pageable
    // memory goes through the driver's bounce buffers.
    virtual void* host_staging(size_t bytes) {
        if (staging_.size() < bytes) staging_.resize(bytes);
        return staging_.data();
    }
    // A device-to-host copy of t into `host` (a host_staging() buffer) that is recorded like an op and so runs
    // in the step's order without ending it; wait_host(ticket) returns once it has landed. Lets the host use
    // one part of a step's results while the device still computes the next (final_logits' vocabulary chunks).
    // Tickets count from 0 at each reset_scratch(). The default copies at once (the CPU backend).
    virtual int to_host_async(const Tensor& t, void* host) {
        to_host(t, host);
        return 0;
    }
    virtual void wait_host(int /*ticket*/) {}
    virtual void from_host(Tensor& t, const void* host) = 0;
    virtual void zero(Tensor& t) = 0;
    virtual void copy(const Tensor& src, Tensor& dst) = 0;  // same dtype and element count
    virtual void synchronize() {}
    // True when upload() fills tensors with pseudo-random values instead of reading them (--random-weights):
    // quantized readers then skip decoding the packed data on the host.
    virtual bool random_weights() const { return false; }

    // ---- ops (x, out in act dtype unless noted; shapes row-major) ----
    // out[T, H] = table[ids[t], :]; ids [T] I32 on the device; table any float dtype.
    virtual void embedding(const Tensor& table, const Tensor& ids, Tensor& out) = 0;
    // Row-wise RMSNorm over the last dim D: x [R, D], w [D] -> out [R, D]. in place allowed.
    virtual void rmsnorm(const Tensor& x, const Tensor& w, float eps, NormKind kind, Tensor& out) = 0;
    // Gated RMSNorm (Qwen3.5 GDN output): out = w * (x / rms(x)) * silu(z); x, z [R, D], w [D].
    virtual void rmsnorm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& out) = 0;
    virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;  // out = a + b (same shape)
    virtual void scale(Tensor& x, float s) = 0;                           // x *= s
    virtual void mul_sigmoid(Tensor& x, const Tensor& gate) = 0;          // x *= sigmoid(gate), same shape
    // out [T, I] = silu(gate) * up; gate, up [T, I].
    virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
    // Columns [c0, c0 + out.cols()) of src [R, C] into out [R, n].
    virtual void copy_cols(const Tensor& src, int64_t c0, Tensor& out) = 0;
    // Rotates x [T, H, D] in place; positions [T] I32 on the device.
    virtual void rope(Tensor& x, const Tensor& positions, const RopeParams& p) = 0;
    // Causal GQA attention with a KV cache. q [T, Hq, D]; k, v [T, Hkv, D] are written into
    // k_cache/v_cache [max_ctx, Hkv, D] at rows n_past..n_past+T-1, then out [T, Hq, D] =
    // softmax(q k^T * scale) v over cache rows 0..n_past+t for query t (fp32 softmax).
    virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                           int64_t n_past, float scale, Tensor& out) = 0;
    // Depthwise causal conv1d (kernel K, tap K-1 = current token) + SiLU. x [T, C]; w [C, K];
    // state [K-1, C] holds the previous K-1 pre-conv rows (zeros at start) and is updated; out [T, C].
    virtual void conv1d_silu(const Tensor& x, const Tensor& w, Tensor& state, Tensor& out) = 0;
    // Gated DeltaNet (Qwen3.5 linear attention). q, k [T, Hk, dk]; v [T, Hv, dv]; a, b [T, Hv] raw projections;
    // A_log, dt_bias [Hv] F32; state [Hv, dk, dv] F32 updated in place; out [T, Hv, dv].
    // Inside: L2-normalise q, k (eps 1e-6), q *= dk^-0.5, beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias);
    // value head h uses key head h / (Hv / Hk).
    virtual void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                                  const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, Tensor& state,
                                  Tensor& out) = 0;
    // out [T, N] = x [T, K] @ w[N, K]^T for a plain (BF16/F16/F32) weight; used by the BF16 Linear.
    virtual void matmul(const Tensor& x, const Tensor& w, Tensor& out) = 0;
    // ys[i] [T, n_i] = x [T, K] @ (the next n_i rows of w [N, K])^T, the parts covering w in order (a stacked
    // projection group). Default: one matmul per part; a backend may run one matmul and split its output.
    // (ys is a pointer and count: CUDA sources include this header as C++17.)
    virtual void matmul_split(const Tensor& x, const Tensor& w, Tensor* ys, size_t n_ys) {
        int64_t r0 = 0;
        for (size_t i = 0; i < n_ys; ++i) {
            const Tensor rows = w.row_slice(r0, ys[i].cols());
            matmul(x, rows, ys[i]);
            r0 += ys[i].cols();
        }
    }
    virtual void add_bias(Tensor& x, const Tensor& bias) = 0;  // x [T, N] += bias [N]
    // out [R] I32 = the index of each row's largest value of logits [R, V] (the lowest on ties; NaN never
    // wins), for greedy decoding without copying the logits back.
    virtual void argmax(const Tensor& logits, Tensor& out) = 0;

    // ---- fused ops (decode speed, issue 4) ----
    // Each equals the sequence of the ops above named in its comment: the CPU backend runs exactly that
    // sequence (it is the oracle), the CUDA backend fewer, larger kernels (a decode step launches each kernel
    // separately, so launches, not bytes, were a quarter of the step).
    //
    // x += y, then out = rmsnorm(x): add(x, y, x); rmsnorm(x, w, eps, kind, out). x, y, out [R, D]; w [D].
    virtual void add_rmsnorm(Tensor& x, const Tensor& y, const Tensor& w, float eps, NormKind kind, Tensor& out) = 0;
    // The gated attention of Qwen3.5 / Qwen3-Next between the projections and o_proj. qg [T, Hq * 2D] holds per
    // head [query | gate]; k, v [T, Hkv * D]. Sequence: copy_cols the query and the gate out of qg seen as
    // [T * Hq, 2D]; rmsnorm (PLUS_ONE, eps) the query with q_norm [D] and k with k_norm [D]; rope both at
    // positions [T] I32 (which must hold n_past + t); attention with the caches at n_past and `scale` into
    // out [T, Hq * D]; mul_sigmoid(out, gate). k is overwritten (normalised and rotated).
    virtual void gated_attention_core(const Tensor& qg, Tensor& k, const Tensor& v, const Tensor& q_norm,
                                      const Tensor& k_norm, float eps, const Tensor& positions, const RopeParams& rope,
                                      Tensor& k_cache, Tensor& v_cache, int64_t n_past, float scale, Tensor& out) = 0;
    // The Gated DeltaNet of Qwen3.5 between the projections and out_proj. mixed [T, C] holds the pre-conv
    // q | k | v (C = 2 Hk dk + Hv dv, Hk = n_k_heads; Hv, dk, dv from state [Hv, dk, dv] F32). Sequence:
    // conv1d_silu(mixed, conv_w [C, K], conv_state [K-1, C]); copy_cols q, k, v; gated_delta_rule with a, b
    // [T, Hv], A_log, dt_bias [Hv] and state; rmsnorm_gated per value head (rows of dv) with z [T, Hv * dv] and
    // norm_w [dv] into out [T, Hv * dv].
    virtual void gdn_core(const Tensor& mixed, const Tensor& conv_w, Tensor& conv_state, const Tensor& a,
                          const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, Tensor& state, const Tensor& z,
                          const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out) = 0;
    // gdn_core after the conv (conv [T, C] = conv1d_silu(mixed), already run: ProjGroup::forward_conv), with a,
    // b computed inside from x [T, H] (the layer's normed input) and the stacked weight ba_w [2 Hv, H]
    // (in_proj_b's rows, then in_proj_a's), both rounded to the act dtype as the projection would store them:
    // one launch and one round trip fewer per layer. z_prior: z was written before the op recorded just before
    // this one (false when that op wrote z itself: the fused projection + conv), which lets the CUDA kernel
    // read it before its programmatic-launch wait. The model calls it only where fuses_gdn_ba(T, ba_w) says
    // so; otherwise it projects b, a and calls gdn_core.
    virtual bool fuses_gdn_ba(int64_t /*T*/, const Tensor& /*ba_w*/) const { return false; }
    // gdn_core after the conv (conv [T, C] = conv1d_silu(mixed), already run: ProjGroup::forward_conv), a and b
    // given; z_prior as for gdn_core_ba. The default is the unfused sequence from the conv on.
    virtual void gdn_core_conv(const Tensor& conv, const Tensor& a, const Tensor& b, const Tensor& A_log,
                               const Tensor& dt_bias, Tensor& state, const Tensor& z, bool /*z_prior*/,
                               const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out) {
        gdn_after_conv_unfused(conv, a, b, A_log, dt_bias, state, z, norm_w, eps, n_k_heads, out);
    }
    virtual void gdn_core_ba(const Tensor& /*conv*/, const Tensor& /*x*/, const Tensor& /*ba_w*/,
                             const Tensor& /*A_log*/, const Tensor& /*dt_bias*/, Tensor& /*state*/,
                             const Tensor& /*z*/, bool /*z_prior*/, const Tensor& /*norm_w*/, float /*eps*/,
                             int64_t /*n_k_heads*/, Tensor& /*out*/) {
        throw Error(name() + ": gdn_core_ba is not implemented (check fuses_gdn_ba first)");
    }
    // A hint from the model: device memory [data, data + bytes) (the next projection's weight) is read right
    // after the next latency-bound op (the DeltaNet step, the gated attention), under which the memory bus
    // idles. A GPU backend may have that op ask its cache for the range meanwhile (CudaBackend: into L2,
    // kernels/cuda/l2_prefetch.h, up to a cap; hints not taken by the next op are dropped). Results are
    // unchanged. Default: nothing.
    virtual void l2_prefetch(const void* /*data*/, size_t /*bytes*/) {}
    // A hint from the model for the next add_rmsnorm only: the op recorded after it is a Linear forward (the
    // layer's next projection). Such a forward reads nothing but its weights before its input is ready, so a
    // GPU backend may let its kernels start ahead of add_rmsnorm's own wait (CudaBackend: programmatic
    // launch, common.cuh pdl_enter_ahead) and fetch weights while add_rmsnorm's predecessor, the previous
    // projection, finishes. Results are unchanged. The model also gives it before gdn_core_ba and
    // gated_attention_core, whose last kernels then let out_proj / o_proj launch ahead (session 35, H100,
    // three alternated rounds: plain step INT4 -0.4%, FP8 -0.35%; in session 17 the same before out_proj,
    // o_proj and down had made FP8 3% slower).
    void linear_follows() { linear_follows_ = true; }

protected:
    // The linear_follows() hint, cleared by the op that reads it (add_rmsnorm reads it first, on every path).
    bool take_linear_follows() {
        const bool v = linear_follows_;
        linear_follows_ = false;
        return v;
    }
    // The unfused sequences above, through this backend's own ops with act_dtype() scratch (backend_fused.cpp):
    // the CPU backend's implementation of the fused ops, and the CUDA backend's for prompts.
    void gated_attention_core_unfused(const Tensor& qg, Tensor& k, const Tensor& v, const Tensor& q_norm,
                                      const Tensor& k_norm, float eps, const Tensor& positions, const RopeParams& rope,
                                      Tensor& k_cache, Tensor& v_cache, int64_t n_past, float scale, Tensor& out);
    void gdn_core_unfused(const Tensor& mixed, const Tensor& conv_w, Tensor& conv_state, const Tensor& a,
                          const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, Tensor& state, const Tensor& z,
                          const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out);
    void gdn_after_conv_unfused(const Tensor& conv, const Tensor& a, const Tensor& b, const Tensor& A_log,
                                const Tensor& dt_bias, Tensor& state, const Tensor& z, const Tensor& norm_w, float eps,
                                int64_t n_k_heads, Tensor& out);

  private:
    std::vector<uint8_t> staging_;  // host_staging's buffer where the backend has no page-locked one
    bool linear_follows_ = false;
};

// The CPU oracle backend (always available).
std::unique_ptr<Backend> make_cpu_backend();
// The CUDA backend, or nullptr with `why` filled when none is built in or no device is present.
std::unique_ptr<Backend> make_cuda_backend(std::string* why);
// "auto" picks CUDA when available, else CPU; "cpu" / "cuda" force one (cuda throws Error when unavailable).
std::unique_ptr<Backend> make_backend(const std::string& which);

}  // namespace grimoire
