// Shared building blocks for architectures (src/model/arch/*.cpp): a weight loader that checks names and
// shapes, the dense attention block (GQA, optional q/k/v/o biases, optional per-head q/k RMSNorm, RoPE), the
// SwiGLU MLP, and DenseDecoder, the whole Llama-family model (embedding -> N x [norm, attention, residual,
// norm, MLP, residual] -> norm -> lm_head). Llama, Qwen2 and Qwen3 differ only in the options of these
// blocks, so each arch file reads its config and fills a DenseDecoderConfig.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "quant/linear.h"
#include "quant/quantized.h"

namespace grimoire {

// Uploads checkpoint tensors onto a backend, refusing missing tensors and wrong shapes with the file and
// tensor named, and counting parameters and bytes into ModelInfo.
class WeightLoader {
  public:
    WeightLoader(Backend& be, const Checkpoint& ckpt, QuantConfig qc, ModelInfo& info)
        : be_(be), ckpt_(ckpt), qc_(std::move(qc)), info_(info) {}

    bool has(const std::string& name) const { return ckpt_.has(name); }
    // A weight matrix kept in its stored float dtype on an F32 backend, else the act dtype (embeddings).
    Tensor matrix(const std::string& name, const std::vector<int64_t>& shape);
    // A 1-D parameter (norm weight, bias) as F32.
    Tensor vector_f32(const std::string& name, int64_t n);
    // The Linear at `prefix` (any weight format) with the given sizes; `bias` says whether `prefix.bias` must
    // be present (true) or absent (false). `role`: what the weight is in the model (a layout hint for quantized
    // weights, quant/quantized.h WeightRole).
    std::unique_ptr<Linear> linear(const std::string& prefix, int64_t in, int64_t out, bool bias,
                                   WeightRole role = WeightRole::OTHER);
    // The weights of the projections at `prefixes` (same input) stacked along out into one [sum outs, in]
    // tensor, when all are plain float weights of one dtype without bias; an empty Tensor otherwise
    // (quantized formats, biases).
    Tensor stacked(const std::vector<std::string>& prefixes, int64_t in, const std::vector<int64_t>& outs);

    // The quantized weight at `prefix` (any quantized format) in canonical host form, checked against
    // [out, in] and `bias` as linear() does; nullopt for a plain float weight.
    std::optional<QuantHost> quantized(const std::string& prefix, int64_t in, int64_t out, bool bias);
    // The Linear of a (possibly stacked) quantized host weight, counted into ModelInfo.
    std::unique_ptr<Linear> quantized_linear(QuantHost h);
    Backend& backend() const { return be_; }
    const Checkpoint& checkpoint() const { return ckpt_; }

  private:
    const TensorInfo& expect(const std::string& name, const std::vector<int64_t>& shape) const;
    void count(int64_t params, size_t bytes);

    Backend& be_;
    const Checkpoint& ckpt_;
    QuantConfig qc_;
    ModelInfo& info_;
};

// ---- attention ----

struct AttentionConfig {
    int64_t hidden = 0;      // model width H
    int64_t n_heads = 0;     // Hq
    int64_t n_kv_heads = 0;  // Hkv (divides Hq)
    int64_t head_dim = 0;    // D (need not be H / Hq)
    bool qkv_bias = false;   // q/k/v_proj.bias present (Qwen2; Llama/Qwen3 with attention_bias)
    bool o_bias = false;     // o_proj.bias present (Llama/Qwen3 with attention_bias)
    bool qk_norm = false;    // per-head RMSNorm of q and k before RoPE (Qwen3), PLAIN kind
    float norm_eps = 1e-6f;
    RopeParams rope;
};

// Projections of one input, run as few matmuls as the checkpoint allows: parts whose weights can be stacked
// along out at load (plain floats of one dtype without bias: WeightLoader::stacked; quantized parts of one
// format that agree on K, groups, act-order and scales: stack_quantized) form one Linear, a "unit". Decode then
// launches one GEMV per unit and returns views into its [1, sum] result (contiguous for one token); several
// tokens get one contiguous [T, w] tensor per part through Linear::forward_split (plain weights: one GEMM per
// row range of the stacked weight, no copies, no extra scratch).
class ProjGroup {
  public:
    ProjGroup() = default;
    // `units` in order, each covering the next parts of `widths` (its out_features = their sum).
    ProjGroup(std::vector<std::unique_ptr<Linear>> units, std::vector<int64_t> widths);
    // `stacked` [sum widths, in] on the backend: one unit.
    ProjGroup(const Backend& be, Tensor stacked, std::vector<int64_t> widths);
    // One unit per part.
    explicit ProjGroup(std::vector<std::unique_ptr<Linear>> parts);
    // The parts of units [0, n_units) (all by default), in order.
    std::vector<Tensor> forward(Backend& be, const Tensor& x, size_t n_units = SIZE_MAX) const;
    // forward() with part 0 through Backend::conv1d_silu (conv_w [C, Kc], conv_state [Kc - 1, C] advanced):
    // one pass where unit 0 offers_conv (Linear::forward_split_conv; the other units then run first), else the
    // units and then conv1d_silu as its own op. *fused says which (the op writing part 0's result also wrote
    // the rest of unit 0's parts in the first case).
    std::vector<Tensor> forward_conv(Backend& be, const Tensor& x, size_t n_units, const Tensor& conv_w,
                                     Tensor& conv_state, bool* fused = nullptr) const;
    int64_t width(size_t i) const { return widths_[i]; }
    bool is_stacked() const { return units_.size() < widths_.size(); }
    size_t n_units() const { return units_.size(); }  // matmuls one forward launches
    const Linear& unit(size_t u) const { return *units_[u].lin; }
    size_t unit_first(size_t u) const { return units_[u].first; }  // the unit's first part
    size_t unit_count(size_t u) const { return units_[u].count; }

  private:
    struct Unit {
        std::unique_ptr<Linear> lin;
        size_t first = 0, count = 0;  // parts [first, first + count)
    };
    std::vector<Unit> units_;
    std::vector<int64_t> widths_;
};

// Stacked when possible (runs of consecutive parts that stack; the environment variable GRIMOIRE_STACK_QUANT=0
// keeps quantized parts separate, for A/B measurements), else loaded one by one with the same shape checks and
// errors as WeightLoader::linear. `role` goes to a quantized unit that stacks every part (a hint, as there).
ProjGroup load_proj_group(WeightLoader& wl, const std::vector<std::string>& prefixes, int64_t in,
                          const std::vector<int64_t>& outs, bool bias, WeightRole role = WeightRole::OTHER);

struct AttentionWeights {
    ProjGroup qkv;  // q [Hq * D], k, v [Hkv * D]
    std::unique_ptr<Linear> o;
    Tensor q_norm, k_norm;  // [D] F32 when qk_norm
};

// Loads `prefix`.{q,k,v,o}_proj (+ q_norm/k_norm), e.g. prefix "model.layers.3.self_attn".
AttentionWeights load_attention(WeightLoader& wl, const std::string& prefix, const AttentionConfig& c);

// out [T, H] = attention block of x [T, H] act at positions [T] I32 (device), appending to `st`'s caches
// at rows n_past..n_past+T-1.
void attention_forward(Backend& be,
                       const AttentionWeights& w,
                       const AttentionConfig& c,
                       const Tensor& x,
                       const Tensor& positions,
                       LayerState& st,
                       int64_t n_past,
                       Tensor& out);

// ---- MLP ----

struct MlpWeights {
    ProjGroup gate_up;  // gate, up [I] each
    std::unique_ptr<Linear> down;
};

// Loads `prefix`.{gate,up,down}_proj, e.g. prefix "model.layers.3.mlp".
MlpWeights load_mlp(
    WeightLoader& wl, const std::string& prefix, int64_t hidden, int64_t intermediate, bool bias);

// out [T, H] = down(silu(gate(x)) * up(x)); x [T, H] act.
void mlp_forward(Backend& be, const MlpWeights& w, const Tensor& x, Tensor& out);
// The residual add + RMSNorm and the block in one pass (Linear::forward_norm_mlp): res += y, then y =
// MLP(rmsnorm(res) * norm_w). Returns false, having done nothing, where the weights do not offer it.
bool norm_mlp_forward(Backend& be, const MlpWeights& w, Tensor& res, const Tensor& norm_w, float eps, NormKind kind,
                      Tensor& y);

// ---- the two ends of every decoder forward ----

struct ForwardInputs {
    Tensor x;          // [T, H] act: the embedded tokens, i.e. the residual stream at layer 0
    Tensor positions;  // [T] I32 on the device: n_past .. n_past + T - 1
};

// Starts a forward of `tokens` at st.n_past: refuses a context overflow or an id outside [0, vocab) (Error),
// resets the scratch arena, uploads ids and positions and embeds the tokens with `embed` [vocab, H].
ForwardInputs begin_forward(Backend& be,
                            const SequenceState& st,
                            std::span<const int32_t> tokens,
                            int64_t n_logits,
                            const Tensor& embed);

// The last n_logits rows of the residual stream x [T, H] act through the final norm and lm_head, into host
// fp32 logits [n_logits, vocab] (resized; empty when n_logits is 0). A plain lm_head runs in `chunks` row
// ranges whose copies to the host and widening overlap the next range's GEMV (0: logit_chunks decides).
void final_logits(Backend& be,
                  const Tensor& x,
                  const Tensor& norm_w,
                  float eps,
                  NormKind kind,
                  const Linear& lm_head,
                  int64_t n_logits,
                  std::vector<float>& logits,
                  int64_t chunks = 0);
// The same head, greedy: ids [n_rows] (resized) = the argmax over the vocabulary of each of the last n_rows rows'
// logits, on the backend (Backend::argmax), so only the ids come back.
void final_greedy(Backend& be,
                  const Tensor& x,
                  const Tensor& norm_w,
                  float eps,
                  NormKind kind,
                  const Linear& lm_head,
                  int64_t n_rows,
                  std::vector<int32_t>& ids);
// Vocabulary chunks for n_logits rows: 4 from 131072 entries, 2 from 65536, else 1, and 1 above 16 rows;
// GRIMOIRE_LOGIT_CHUNKS=N forces N (1: the single GEMV and copy, for A/B).
int64_t logit_chunks(int64_t vocab, int64_t n_logits);

// ---- what every decoder here shares ----

// The two ends of a decoder's weights and its residual stack, shared by DenseDecoder and HybridDecoder.
// The constructor resets info's parameter counts, which the WeightLoader then accumulates.
class StackedDecoder : public Model {
  public:
    void forward(SequenceState& st, std::span<const int32_t> tokens, int64_t n_logits,
                 std::vector<float>& logits) final {
        const Body b = body(st, tokens, n_logits);
        final_logits(*be_, b.x, final_norm_, b.eps, b.kind, *lm_head_, n_logits, logits);
    }
    void forward_greedy(SequenceState& st, std::span<const int32_t> tokens, int64_t n_rows,
                        std::vector<int32_t>& ids) final {
        const Body b = body(st, tokens, n_rows);
        final_greedy(*be_, b.x, final_norm_, b.eps, b.kind, *lm_head_, n_rows, ids);
    }

  protected:
    StackedDecoder(Backend& be, ModelInfo info);
    // The architecture's layers over `tokens` (state advanced): the residual stream x [T, H] before the final
    // norm, and that norm's eps and kind; n_rows: the rows the head will read.
    struct Body {
        Tensor x;
        float eps = 0.0f;
        NormKind kind = NormKind::PLAIN;
    };
    virtual Body body(SequenceState& st, std::span<const int32_t> tokens, int64_t n_rows) = 0;
    // `prefix`embed_tokens.weight [vocab, H].
    void load_embedding(WeightLoader& wl, const std::string& prefix, int64_t vocab, int64_t hidden);
    // `prefix`norm.weight and lm_head (the embedding when tied or when lm_head.weight is absent).
    void load_head(WeightLoader& wl, const std::string& prefix, int64_t vocab, int64_t hidden, bool tie);

    // The layer i's two pre-norm weights [H] F32 and its blocks: mixer(i, h, y) and mlp(i, h, y) write
    // y [T, H] from the normalised h [T, H]; each begins with a Linear forward (run_stack tells the backend
    // so before the add_rmsnorm in front of it: Backend::linear_follows).
    struct StackOps {
        std::function<const Tensor&(size_t i)> in_norm, post_norm;
        std::function<void(size_t i, const Tensor& h, Tensor& y)> mixer, mlp;
        // Optional: x += y, then y = mlp(norm_post(x)) in one pass where the layer's weights offer it
        // (Linear::forward_norm_mlp); returns false, having done nothing, where they do not.
        std::function<bool(size_t i, Tensor& x, const Tensor& w, float eps, NormKind kind, Tensor& y)> norm_mlp;
    };
    // Runs n pre-norm residual layers over the stream x [T, H] act: h = norm_in(x); x += mixer(h);
    // h = norm_post(x); x += mlp(h). Each residual add is fused with the norm after it (add_rmsnorm); the
    // last stays a plain add (final_logits normalises only the rows it needs).
    void run_stack(Tensor& x, size_t n, float eps, NormKind kind, const StackOps& ops) const;

    Tensor embed_;       // [V, H]
    Tensor final_norm_;  // [H] F32
    std::unique_ptr<Linear> lm_head_;
};

// ---- the dense decoder (Llama, Qwen2, Qwen3) ----

struct DenseDecoderConfig {
    std::string prefix = "model.";  // tensor-name prefix of the decoder stack
    int64_t vocab = 0;
    int64_t n_layers = 0;
    int64_t intermediate = 0;
    bool mlp_bias = false;
    bool tie_embeddings = false;  // lm_head is the embedding table (also when lm_head.weight is absent)
    AttentionConfig attn;
};

// Builds the model from the checkpoint; `info` already holds the config-derived fields (architecture,
// eos...).
std::unique_ptr<Model> make_dense_decoder(
    Backend& be, const Checkpoint& ckpt, const QuantConfig& qc, const DenseDecoderConfig& c, ModelInfo info);

// Reads the fields every Llama-family config shares into `c` (sizes, heads, head_dim, eps, rope, tie),
// refusing unsupported values (hidden_act other than silu, sliding windows) naming the key and value.
void read_dense_decoder_config(const ConfigReader& cfg, DenseDecoderConfig& c);

}  // namespace grimoire
