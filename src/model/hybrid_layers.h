// Building blocks of the Qwen3.5 / Qwen3.6 / Qwen3-Next hybrid decoders (models-and-formats.md §1.4-1.6):
// gated full attention, the Gated DeltaNet mixer, the MTP head's weights, and HybridDecoder, the whole model
// (embedding -> N x [(1+w) norm, mixer, residual, (1+w) norm, SwiGLU MLP, residual] -> (1+w) norm -> lm_head,
// the mixer being attention or DeltaNet per `layer_types`). src/model/arch/qwen3_5.cpp and qwen3_next.cpp read
// their configs into a HybridConfig; the MLP and the weight loader are the dense ones from layers.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/layers.h"

namespace grimoire {

// ---- gated attention ----
// q_proj emits, per head, [query (D) | gate (D)]; q and k get a per-head (1+w) RMSNorm, partial NeoX RoPE
// (rope.rot_dim of D), GQA attention, then the output is multiplied by sigmoid(gate) before o_proj.
// AttentionConfig from layers.h is reused; its qkv_bias / o_bias / qk_norm fields are ignored here (no biases,
// always the (1+w) q/k norm).

struct GatedAttentionWeights {
    ProjGroup qkv;                       // q [2 * Hq * D] (per head [query | gate]), k, v [Hkv * D]
    std::unique_ptr<Linear> o;
    Tensor q_norm, k_norm;               // [D] F32, (1+w)
};

// Loads `prefix`.{q,k,v,o}_proj and q_norm / k_norm, e.g. prefix "model.language_model.layers.3.self_attn".
GatedAttentionWeights load_gated_attention(WeightLoader& wl, const std::string& prefix, const AttentionConfig& c);

// out [T, H] = gated attention of x [T, H] act at positions [T] I32, appending to st's KV cache at n_past.
void gated_attention_forward(Backend& be, const GatedAttentionWeights& w, const AttentionConfig& c, const Tensor& x,
                             const Tensor& positions, LayerState& st, int64_t n_past, Tensor& out);

// ---- Gated DeltaNet ----

struct GdnConfig {
    int64_t hidden = 0;
    int64_t n_k_heads = 0, n_v_heads = 0;  // Hk, Hv (Hk divides Hv; value head h reads key head h / (Hv/Hk))
    int64_t k_dim = 0, v_dim = 0;          // dk, dv per head
    int64_t conv_kernel = 4;               // K; the conv state keeps the last K-1 pre-conv rows
    float norm_eps = 1e-6f;
    bool fused = false;  // Qwen3-Next: in_proj_qkvz / in_proj_ba with the per-key-head-group layout
    int64_t key_size() const { return n_k_heads * k_dim; }
    int64_t value_size() const { return n_v_heads * v_dim; }
    int64_t conv_channels() const { return 2 * key_size() + value_size(); }  // q | k | v
};

struct GdnWeights {
    ProjGroup in;  // qkv [conv_channels] (rows q | k | v; Qwen3-Next's fused rows regrouped), z [Hv * dv], b, a [Hv]
    Tensor conv;                   // [C, K] F32
    Tensor A_log, dt_bias;         // [Hv] F32 (A_log may be BF16 or F32 in the file)
    Tensor norm;                   // [dv] F32, plain w (gated norm)
    std::unique_ptr<Linear> out;   // [H, Hv * dv]
};

// Loads `prefix` (".../linear_attn"); counts what it uploads into `info` (n_params, weight_bytes) for the
// tensors WeightLoader cannot upload itself (3-D conv weight, regrouped fused projections).
GdnWeights load_gdn(WeightLoader& wl, const std::string& prefix, const GdnConfig& c, ModelInfo& info);

// out [T, H] = DeltaNet mixer of x [T, H] act; advances st.conv_state [K-1, C] and st.recurrent_state
// [Hv, dk, dv] F32.
void gdn_forward(Backend& be, const GdnWeights& w, const GdnConfig& c, const Tensor& x, LayerState& st, Tensor& out);

// ---- the hybrid decoder ----

struct HybridConfig {
    std::string prefix;  // "model.language_model." (ConditionalGeneration) or "model." (CausalLM, Qwen3-Next)
    int64_t vocab = 0, n_layers = 0, intermediate = 0;
    std::vector<bool> linear;  // per layer: true = Gated DeltaNet, false = gated full attention
    bool tie_embeddings = false;
    int64_t n_mtp_layers = 0;  // mtp.layers.* to load (0: none in the checkpoint)
    AttentionConfig attn;
    GdnConfig gdn;
};

// One MTP (multi-token prediction) layer stack and its input fusion, kept for the speculative-decoding issue:
// u = fc([pre_fc_norm_embedding(embed(x)) ; pre_fc_norm_hidden(h)]) -> full-attention decoder layer(s) -> norm,
// logits from the main lm_head (models-and-formats.md §1.6). All norms are (1+w).
struct MtpLayer {
    Tensor input_norm, post_norm;  // [H] F32
    GatedAttentionWeights attn;
    MlpWeights mlp;
};
struct MtpWeights {
    std::unique_ptr<Linear> fc;                              // [H, 2H]
    Tensor pre_fc_norm_embedding, pre_fc_norm_hidden, norm;  // [H] F32
    std::vector<MtpLayer> layers;
};

// Reads what Qwen3.5 and Qwen3-Next text configs share (sizes, heads, layer_types, linear_*, eps, partial
// RoPE, tie), refusing unsupported values naming the key. Without a partial_rotary_factor the rotary width is a
// quarter of head_dim (transformers' default for both families). `root` is the whole config.json (for
// multimodal wrappers the top-level tie_word_embeddings decides), `cfg` its text part.
void read_hybrid_config(const ConfigReader& cfg, const ConfigReader& root, HybridConfig& c);

std::unique_ptr<Model> make_hybrid_decoder(Backend& be, const Checkpoint& ckpt, const QuantConfig& qc,
                                           const HybridConfig& c, ModelInfo info);
// The MTP head of a model built by make_hybrid_decoder (nullptr for other models or when it has none).
const MtpWeights* hybrid_mtp_weights(const Model& m);

}  // namespace grimoire
