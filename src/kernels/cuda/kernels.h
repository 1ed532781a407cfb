// CUDA kernel entry points (one op per .cu beside this header). Each entry point validates shapes and dtypes
// and throws grimoire::Error naming the op; inside each .cu a static launcher takes raw pointers + stream and
// a static __global__ kernel does the work. Activations may be BF16 or F32 (math in fp32); every launch is
// on the given stream and none synchronises, so a sequence of them can be captured into a CUDA graph.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/backend.h"
#include "core/tensor.h"
#include "kernels/cuda/l2_prefetch.h"

namespace grimoire::cuda {

// out [T, H] = table [V, H] rows ids [T] (I32).
void embedding(const Tensor& table, const Tensor& ids, Tensor& out, cudaStream_t s);
// Row-wise RMSNorm over the last dim; in place allowed.
void rmsnorm(const Tensor& x, const Tensor& w, float eps, NormKind kind, Tensor& out, cudaStream_t s);
// out = w * (x / rms(x)) * silu(z), rows of D = w.numel(). With z_rows_per_token = H > 0, z is read in place
// from wider token rows: row r = t H + h of z starts at element t * z_stride + h * D of z.data.
void rmsnorm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& out, cudaStream_t s,
                   int64_t z_stride = 0, int64_t z_rows_per_token = 0);
void add(const Tensor& a, const Tensor& b, Tensor& out, cudaStream_t s);
void scale(Tensor& x, float v, cudaStream_t s);
void mul_sigmoid(Tensor& x, const Tensor& gate, cudaStream_t s);
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, cudaStream_t s);
void copy_cols(const Tensor& src, int64_t c0, Tensor& out, cudaStream_t s);
void add_bias(Tensor& x, const Tensor& bias, cudaStream_t s);
// Element-wise dtype conversion (F32/BF16/F16), same element count.
void convert(const Tensor& src, Tensor& dst, cudaStream_t s);
void rope(Tensor& x, const Tensor& positions, const RopeParams& p, cudaStream_t s);

// Decode/prefill attention. `n_past_dev` (device int, may be null) overrides `n_past` when given: a
// captured graph reads the current length from it at replay. `ws` is device workspace of attention_ws_bytes().
struct AttnArgs {
    int64_t n_past = 0;
    const int* n_past_dev = nullptr;
    float scale = 1.0f;
    void* ws = nullptr;
    size_t ws_bytes = 0;
};
size_t attention_ws_bytes(int64_t Hq, int64_t D);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
               const AttnArgs& a, Tensor& out, cudaStream_t s);

// x_stride (elements between x's rows; 0: x.cols()) lets x be read in place from a wider row.
void conv1d_silu(const Tensor& x, const Tensor& w, Tensor& state, Tensor& out, cudaStream_t s, int64_t x_stride = 0);
// T >= 64 with a workspace of gated_delta_rule_ws_bytes() runs the chunked (WY) prefill form, otherwise the
// token-by-token recurrence; both update `state` the same way. The size depends on the path q, k, v of dtype
// `act` take (the tensor-core path for BF16 needs ~4x less than the fp32 one).
size_t gated_delta_rule_ws_bytes(int64_t T, int64_t Hv, int64_t dk, int64_t dv, DType act);
void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                      const Tensor& A_log, const Tensor& dt_bias, Tensor& state, Tensor& out, void* ws,
                      size_t ws_bytes, cudaStream_t s);
// The same with q, k, v read in place from qkv [T, 2 Hk dk + Hv dv] = q | k | v per token (the conv output of
// Backend::gdn_core), so the prompt path needs no copies; Hv, dv come from state [Hv, dk, dv]. Row strides
// (0: dense) let qkv and a, b [T, Hv] be read in place from wider rows.
void gated_delta_rule_qkv(const Tensor& qkv, int64_t Hk, int64_t dk, const Tensor& a, const Tensor& b,
                          const Tensor& A_log, const Tensor& dt_bias, Tensor& state, Tensor& out, void* ws,
                          size_t ws_bytes, cudaStream_t s, int64_t qkv_stride = 0, int64_t ab_stride = 0);

// y [T, N] = x [T, K] @ w [N, K]^T for small T (decode), bandwidth-bound; x, y BF16/F32, w BF16/F16/F32.
constexpr int64_t kGemvMaxT = 8;
void gemv(const Tensor& x, const Tensor& w, Tensor& out, cudaStream_t s);
// The same into column parts: outs[i] [T, n_i] (one dtype) take w's next n_i rows in order (a stacked
// projection group at decode, Backend::matmul_split), in one launch; 1..kMaxSplitCols parts.
void gemv_split(const Tensor& x, const Tensor& w, const Tensor* outs, int n_outs, cudaStream_t s);

void check_launch(const char* op);  // throws Error naming the op when the last launch failed
bool pdl_enabled();        // launch_pdl sets the programmatic-launch attribute (sm_90+, GRIMOIRE_PDL != 0)
bool pdl_ahead_enabled();  // Backend::linear_follows may let a projection launch ahead (common.cuh
                           // pdl_enter_ahead) of an add + RMSNorm
bool pdl_ahead_mixer_enabled();  // ... and of the mixer's last kernel: out_proj, o_proj
                                 // (GRIMOIRE_PDL_AHEAD_MIXER)

// Token selection on the device. logits [R, V] (F32/BF16) -> out [R] I32.
void argmax(const Tensor& logits, Tensor& out, cudaStream_t s);
// Samples from softmax(logits / temperature) restricted to the top_k largest (top_k <= 64, 0 = 64) and the
// smallest prefix whose mass reaches top_p; `uniform` [R] F32 in [0, 1) supplies the randomness.
void sample(const Tensor& logits, const Tensor& uniform, float temperature, int top_k, float top_p, Tensor& out,
            cudaStream_t s);

// Fills n elements of dtype at p with uniform values in [-amp, amp) + offset from a counter-based hash of
// (seed, index): deterministic, no state. Used by --random-weights.
void random_fill(void* p, DType dtype, int64_t n, uint64_t seed, float amp, float offset, cudaStream_t s);

// ---- fused ops (Backend's fused block; each in its own fused_*.cu) ----
// x += y (stored in x's dtype), out = rmsnorm(x) with w [D]; x, y, out [R, D].
// ahead: the dependent may launch before the one-row kernel waits (common.cuh pdl_enter_ahead).
void add_rmsnorm(Tensor& x, const Tensor& y, const Tensor& w, float eps, NormKind kind, Tensor& out, cudaStream_t s,
                 bool ahead = false);
constexpr int64_t kAttnDecodeMaxT = 8;
// Backend::gated_attention_core for T <= kAttnDecodeMaxT tokens (decode, a verify step): qg [T, Hq * 2D],
// k, v [T, Hkv * D]; token t's position (and cache row) is positions[t] on the device. q_ws [T, Hq, D] act
// scratch; ws / ws_bytes as for attention() (the tokens share its split slots). ahead: the merge kernel lets
// its dependent (o_proj, which reads only weights before its wait) launch before its own wait.
void gated_attention_decode(const Tensor& qg,
                            const Tensor& k,
                            const Tensor& v,
                            const Tensor& q_norm,
                            const Tensor& k_norm,
                            float eps,
                            const Tensor& positions,
                            const RopeParams& rope,
                            Tensor& k_cache,
                            Tensor& v_cache,
                            float scale,
                            Tensor& q_ws,
                            void* ws,
                            size_t ws_bytes,
                            Tensor& out,
                            cudaStream_t s,
                            const L2Prefetch* pf = nullptr,
                            bool ahead = false);
// Backend::gated_attention_core for a prompt of T tokens (cache rows positions[t] = n_past + t; n_past from
// n_past_dev when given): prep (split, norms, RoPE, cache append), flash prefill, sigmoid gate read in place
// from qg. q_ws [T, Hq, D] act scratch. Row strides (0: dense) let qg and k, v be read in place from wider
// token rows (a stacked q | k | v projection's output).
void gated_attention_prefill(const Tensor& qg, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                             const Tensor& k_norm, float eps, const Tensor& positions, const RopeParams& rope,
                             Tensor& k_cache, Tensor& v_cache, int64_t n_past, const int* n_past_dev, float scale,
                             Tensor& q_ws, Tensor& out, cudaStream_t s, int64_t qg_stride = 0,
                             int64_t kv_stride = 0);
// Backend::gdn_core after the conv: the token-by-token recurrence reading q | k | v from conv [T, C], with the
// gated RMSNorm applied, into out [T, Hv * dv]. For short T (the chunked form is for prompts). z_prior false:
// z was written by this kernel's predecessor (the projection that also did the conv), so read after the wait.
void gdn_step_fused(const Tensor& conv, const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                    Tensor& state, const Tensor& z, const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out,
                    cudaStream_t s, bool z_prior = true, const L2Prefetch* pf = nullptr);
// The same with b, a [T, Hv] computed in the kernel as x [T, H] @ ba_w^T (ba_w [2 Hv, H]: b's rows, then a's;
// BF16, H a multiple of 8), rounded to x's dtype (Backend::gdn_core_ba). Only where gdn_step_ba_ok says so.
// z_prior: z's writer ran before this kernel's predecessor, so z may be read before the programmatic wait.
// ahead: the dependent (out_proj) may launch before this kernel's wait.
bool gdn_step_ba_ok(int64_t T, int64_t dv, const Tensor& ba_w);
void gdn_step_fused_ba(const Tensor& conv,
                       const Tensor& x,
                       const Tensor& ba_w,
                       const Tensor& A_log,
                       const Tensor& dt_bias,
                       Tensor& state,
                       const Tensor& z,
                       bool z_prior,
                       const Tensor& norm_w,
                       float eps,
                       int64_t n_k_heads,
                       Tensor& out,
                       cudaStream_t s,
                       const L2Prefetch* pf = nullptr,
                       bool ahead = false);

}  // namespace grimoire::cuda
