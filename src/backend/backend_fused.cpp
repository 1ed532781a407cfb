// The unfused op sequences that define Backend's fused ops (backend.h), written once against the unfused
// virtual ops so the CPU oracle and the CUDA backend's prompt path run the very same steps.
#include "backend/backend.h"

#include "core/error.h"

namespace grimoire {

void Backend::gated_attention_core_unfused(const Tensor& qg, Tensor& k, const Tensor& v, const Tensor& q_norm,
                                           const Tensor& k_norm, float eps, const Tensor& positions,
                                           const RopeParams& rope_p, Tensor& k_cache, Tensor& v_cache, int64_t n_past,
                                           float scale, Tensor& out) {
    if (k_cache.ndim != 3 || k_cache.dim(2) == 0)
        throw Error("gated_attention_core: k_cache must be [max_ctx, Hkv, D]");
    const int64_t T = qg.rows(), Hkv = k_cache.dim(1), D = k_cache.dim(2);
    if (T == 0 || qg.numel() % (T * 2 * D) != 0) throw Error("gated_attention_core: qg is not [T, Hq * 2D]");
    if (k.numel() != T * Hkv * D || v.numel() != k.numel())
        throw Error("gated_attention_core: k and v must be [T, Hkv * D] for the cache's Hkv and D");
    const int64_t Hq = qg.numel() / (T * 2 * D);
    const Tensor rows = qg.view({T * Hq, 2 * D});
    Tensor q = scratch(act_dtype(), {T * Hq, D}), gate = scratch(act_dtype(), {T * Hq, D});
    copy_cols(rows, 0, q);
    copy_cols(rows, D, gate);
    Tensor kr = k.view({T * Hkv, D});
    rmsnorm(q, q_norm, eps, NormKind::PLUS_ONE, q);
    rmsnorm(kr, k_norm, eps, NormKind::PLUS_ONE, kr);
    Tensor q3 = q.view({T, Hq, D}), k3 = k.view({T, Hkv, D});
    rope(q3, positions, rope_p);
    rope(k3, positions, rope_p);
    attention(q3, k3, v.view({T, Hkv, D}), k_cache, v_cache, n_past, scale, out);
    mul_sigmoid(out, gate);
}

void Backend::gdn_core_unfused(const Tensor& mixed, const Tensor& conv_w, Tensor& conv_state, const Tensor& a,
                               const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, Tensor& state,
                               const Tensor& z, const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out) {
    if (state.ndim != 3) throw Error("gdn_core: state must be [Hv, dk, dv]");
    const int64_t T = mixed.rows(), C = mixed.cols(), Hv = state.dim(0), dk = state.dim(1), dv = state.dim(2);
    const int64_t Hk = n_k_heads, key = Hk * dk;
    if (Hk <= 0 || C != 2 * key + Hv * dv) throw Error("gdn_core: mixed is not [T, 2 Hk dk + Hv dv]");
    Tensor conv = scratch(act_dtype(), {T, C});
    conv1d_silu(mixed, conv_w, conv_state, conv);
    gdn_after_conv_unfused(conv, a, b, A_log, dt_bias, state, z, norm_w, eps, n_k_heads, out);
}

void Backend::gdn_after_conv_unfused(const Tensor& conv, const Tensor& a, const Tensor& b, const Tensor& A_log,
                                     const Tensor& dt_bias, Tensor& state, const Tensor& z, const Tensor& norm_w,
                                     float eps, int64_t n_k_heads, Tensor& out) {
    if (state.ndim != 3) throw Error("gdn_core: state must be [Hv, dk, dv]");
    const int64_t T = conv.rows(), C = conv.cols(), Hv = state.dim(0), dk = state.dim(1), dv = state.dim(2);
    const int64_t Hk = n_k_heads, key = Hk * dk;
    if (Hk <= 0 || C != 2 * key + Hv * dv) throw Error("gdn_core: conv is not [T, 2 Hk dk + Hv dv]");
    const DType act = act_dtype();
    Tensor q = scratch(act, {T, key}), k = scratch(act, {T, key}), v = scratch(act, {T, Hv * dv});
    copy_cols(conv, 0, q);
    copy_cols(conv, key, k);
    copy_cols(conv, 2 * key, v);
    Tensor o = scratch(act, {T, Hv, dv});
    gated_delta_rule(q.view({T, Hk, dk}), k.view({T, Hk, dk}), v.view({T, Hv, dv}), a, b, A_log, dt_bias, state, o);
    Tensor rows = out.view({T * Hv, dv});
    rmsnorm_gated(o.view({T * Hv, dv}), z.view({T * Hv, dv}), norm_w, eps, rows);
}

}  // namespace grimoire
