#include "model/hybrid_layers.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "backend/rope_params.h"
#include "quant/formats.h"

namespace grimoire {

namespace {

std::string dims(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

const TensorInfo& expect_shape(const Checkpoint& ckpt, const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo& t = ckpt.get(name);
    if (t.shape != shape)
        throw Error(t.file + ": tensor '" + name + "': expected shape " + dims(shape) + ", found " + dims(t.shape));
    return t;
}

// A dense Linear from fp32 rows [out, in] built on the host, kept in the dtype a stored `stored` weight would
// have on this backend (so a regrouped BF16 projection stays BF16 on the CPU).
std::unique_ptr<Linear> dense_from_host(Backend& be, const float* rows, int64_t out, int64_t in, DType stored,
                                        ModelInfo& info) {
    const DType dt = dense_weight_dtype(be, stored);
    const size_t n = static_cast<size_t>(out * in);
    Tensor w;
    if (dt == DType::F32) {
        w = be.upload_raw(rows, DType::F32, {out, in});
    } else {
        GRIMOIRE_CHECK(dt == DType::BF16 || dt == DType::F16, "dense_from_host: unexpected weight dtype");
        std::vector<uint16_t> half(n);
        for (size_t i = 0; i < n; ++i) half[i] = dt == DType::BF16 ? f32_to_bf16(rows[i]) : f32_to_f16(rows[i]);
        w = be.upload_raw(half.data(), dt, {out, in});
    }
    info.n_params += out * in;
    info.weight_bytes += w.nbytes();
    return make_dense_linear(be, w, Tensor{});
}

// Qwen3-Next stores q, k, v, z (and b, a) interleaved per key-head group: for group g the rows are
// [q_g (dk) | k_g (dk) | v_g (r dv) | z_g (r dv)] with r = Hv / Hk, and [b_g (r) | a_g (r)]. Regrouping the
// rows once at load into planar q | k | v, z, b, a lets the forward be Qwen3.5's.
void load_fused_projections(WeightLoader& wl, const std::string& prefix, const GdnConfig& c, GdnWeights& w,
                            ModelInfo& info) {
    const Checkpoint& ckpt = wl.checkpoint();
    for (const char* name : {".in_proj_qkvz", ".in_proj_ba"})
        if (!ckpt.has(prefix + name + ".weight"))
            throw Error(ckpt.dir() + ": tensor '" + prefix + name +
                        ".weight' not found (quantized fused Qwen3-Next projections are not supported yet)");
    const int64_t H = c.hidden, Hk = c.n_k_heads, r = c.n_v_heads / c.n_k_heads, dk = c.k_dim, dv = c.v_dim;
    const int64_t group = 2 * dk + 2 * r * dv;
    const TensorInfo& qkvz = expect_shape(ckpt, prefix + ".in_proj_qkvz.weight", {Hk * group, H});
    const TensorInfo& ba = expect_shape(ckpt, prefix + ".in_proj_ba.weight", {Hk * 2 * r, H});
    const std::vector<float> src = qkvz.to_f32(), src_ba = ba.to_f32();
    std::vector<float> qkv(static_cast<size_t>(c.conv_channels() * H)), z(static_cast<size_t>(c.value_size() * H));
    std::vector<float> b(static_cast<size_t>(c.n_v_heads * H)), a(b.size());
    auto copy_rows = [H](const std::vector<float>& from, int64_t row, int64_t n, std::vector<float>& to, int64_t at) {
        std::copy_n(from.begin() + row * H, n * H, to.begin() + at * H);
    };
    for (int64_t g = 0; g < Hk; ++g) {
        const int64_t base = g * group;
        copy_rows(src, base, dk, qkv, g * dk);                                // q
        copy_rows(src, base + dk, dk, qkv, c.key_size() + g * dk);            // k
        copy_rows(src, base + 2 * dk, r * dv, qkv, 2 * c.key_size() + g * r * dv);  // v
        copy_rows(src, base + 2 * dk + r * dv, r * dv, z, g * r * dv);        // z
        copy_rows(src_ba, g * 2 * r, r, b, g * r);
        copy_rows(src_ba, g * 2 * r + r, r, a, g * r);
    }
    std::vector<std::unique_ptr<Linear>> parts;
    parts.push_back(dense_from_host(wl.backend(), qkv.data(), c.conv_channels(), H, qkvz.dtype, info));
    parts.push_back(dense_from_host(wl.backend(), z.data(), c.value_size(), H, qkvz.dtype, info));
    parts.push_back(dense_from_host(wl.backend(), b.data(), c.n_v_heads, H, ba.dtype, info));
    parts.push_back(dense_from_host(wl.backend(), a.data(), c.n_v_heads, H, ba.dtype, info));
    w.in = ProjGroup(std::move(parts));
}

}  // namespace

// ---- gated attention ----

GatedAttentionWeights load_gated_attention(WeightLoader& wl, const std::string& prefix, const AttentionConfig& c) {
    GatedAttentionWeights w;
    const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
    w.qkv = load_proj_group(wl, {prefix + ".q_proj", prefix + ".k_proj", prefix + ".v_proj"}, c.hidden,
                            {2 * q_dim, kv_dim, kv_dim}, false);
    w.o = wl.linear(prefix + ".o_proj", q_dim, c.hidden, false);
    w.q_norm = wl.vector_f32(prefix + ".q_norm.weight", c.head_dim);
    w.k_norm = wl.vector_f32(prefix + ".k_norm.weight", c.head_dim);
    return w;
}

void gated_attention_forward(Backend& be, const GatedAttentionWeights& w, const AttentionConfig& c, const Tensor& x,
                             const Tensor& positions, LayerState& st, int64_t n_past, Tensor& out) {
    const int64_t T = x.rows(), D = c.head_dim, Hq = c.n_heads;
    const DType act = be.act_dtype();
    // Per head the 2D outputs of q_proj are [query | gate]; gated_attention_core splits them.
    std::vector<Tensor> qkv = w.qkv.forward(be, x);
    Tensor &qg = qkv[0], &k = qkv[1], &v = qkv[2];
    Tensor att = be.scratch(act, {T, Hq * D});
    w.o->prefetch(be);  // read right after the attention, under which the memory bus idles
    be.linear_follows();
    be.gated_attention_core(qg, k, v, w.q_norm, w.k_norm, c.norm_eps, positions, c.rope, st.k_cache, st.v_cache,
                            n_past, 1.0f / std::sqrt(static_cast<float>(D)), att);
    w.o->forward(be, att, out);
}

// ---- Gated DeltaNet ----

GdnWeights load_gdn(WeightLoader& wl, const std::string& prefix, const GdnConfig& c, ModelInfo& info) {
    GdnWeights w;
    const int64_t H = c.hidden, C = c.conv_channels(), Hv = c.n_v_heads;
    if (c.fused) {
        load_fused_projections(wl, prefix, c, w, info);
    } else {
        w.in = load_proj_group(wl, {prefix + ".in_proj_qkv", prefix + ".in_proj_z", prefix + ".in_proj_b",
                                    prefix + ".in_proj_a"},
                               H, {C, c.value_size(), Hv, Hv}, false);
    }
    // Depthwise Conv1d weight [C, 1, K]: kept F32 as [C, K] (tap K-1 multiplies the current token).
    const TensorInfo& conv = expect_shape(wl.checkpoint(), prefix + ".conv1d.weight", {C, 1, c.conv_kernel});
    w.conv = wl.backend().upload(conv, DType::F32).view({C, c.conv_kernel});
    info.n_params += conv.numel();
    info.weight_bytes += w.conv.nbytes();
    // The decay parameters go to F32 whatever the file holds (27B ships them BF16): g is computed in fp32.
    w.A_log = wl.vector_f32(prefix + ".A_log", Hv);
    w.dt_bias = wl.vector_f32(prefix + ".dt_bias", Hv);
    w.norm = wl.vector_f32(prefix + ".norm.weight", c.v_dim);
    w.out = wl.linear(prefix + ".out_proj", c.value_size(), H, false);
    return w;
}

void gdn_forward(Backend& be, const GdnWeights& w, const GdnConfig& c, const Tensor& x, LayerState& st, Tensor& out) {
    const int64_t T = x.rows();
    const DType act = be.act_dtype();
    Tensor normed = be.scratch(act, {T, c.value_size()});
    // The b | a projection (2 Hv outputs) as its own unit with a plain weight: the backend may fold it into
    // the recurrence (gdn_core_ba) instead of running it as a separate GEMV.
    const size_t nu = w.in.n_units();
    if (nu >= 2 && w.in.unit_first(nu - 1) == 2 && w.in.unit_count(nu - 1) == 2) {
        const Tensor* ba = w.in.unit(nu - 1).plain_weight();
        if (ba && be.fuses_gdn_ba(T, *ba)) {
            // conv1d_silu(mixed), z: one pass where the q | k | v | z projection does the conv as it stores
            bool fused = false;
            std::vector<Tensor> in = w.in.forward_conv(be, x, nu - 1, w.conv, st.conv_state, &fused);
            w.out->prefetch(be);  // read right after the recurrence, under which the memory bus idles
            be.linear_follows();
            be.gdn_core_ba(in[0], x, *ba, w.A_log, w.dt_bias, st.recurrent_state, in[1], !fused, w.norm, c.norm_eps,
                           c.n_k_heads, normed);
            w.out->forward(be, normed, out);
            return;
        }
    }
    if (w.in.unit(0).offers_conv(T, w.conv, st.conv_state)) {  // a verify step: projection and conv in one pass
        bool fused = false;
        std::vector<Tensor> in = w.in.forward_conv(be, x, SIZE_MAX, w.conv, st.conv_state, &fused);
        w.out->prefetch(be);
        be.gdn_core_conv(in[0], in[3], in[2], w.A_log, w.dt_bias, st.recurrent_state, in[1], !fused, w.norm,
                         c.norm_eps, c.n_k_heads, normed);
        w.out->forward(be, normed, out);
        return;
    }
    std::vector<Tensor> in = w.in.forward(be, x);
    Tensor &mixed = in[0], &z = in[1], &b = in[2], &a = in[3];
    w.out->prefetch(be);
    // conv + SiLU, the q | k | v split, the recurrence and the gated RMSNorm per value head (over dv).
    be.gdn_core(mixed, w.conv, st.conv_state, a, b, w.A_log, w.dt_bias, st.recurrent_state, z, w.norm, c.norm_eps,
                c.n_k_heads, normed);
    w.out->forward(be, normed, out);
}

// ---- config ----

void read_hybrid_config(const ConfigReader& cfg, const ConfigReader& root, HybridConfig& c) {
    const std::string act = cfg.get_or<std::string>("hidden_act", "silu");
    if (act != "silu" && act != "swish") cfg.unsupported("hidden_act", "only silu (SwiGLU) is implemented");
    if (cfg.has("output_gate_type")) {
        const auto g = cfg.get<std::string>("output_gate_type");
        if (g != "swish" && g != "silu") cfg.unsupported("output_gate_type", "only swish (SiLU) is implemented");
    }
    if (cfg.get_or<bool>("attention_bias", false))
        cfg.unsupported("attention_bias", "Qwen3.5 attention has no biases");
    if (!cfg.get_or<bool>("attn_output_gate", true))
        cfg.unsupported("attn_output_gate", "only the gated attention of Qwen3.5 / Qwen3-Next is implemented");
    auto positive = [&](const char* key, int64_t dflt) {
        const auto v = cfg.get_or<int64_t>(key, dflt);
        if (v <= 0) cfg.fail(key, std::to_string(v) + " must be positive");
        return v;
    };
    c.vocab = positive("vocab_size", 0);
    c.n_layers = positive("num_hidden_layers", 0);
    c.intermediate = positive("intermediate_size", 0);

    AttentionConfig& a = c.attn;
    a.hidden = positive("hidden_size", 0);
    a.n_heads = positive("num_attention_heads", 0);
    a.n_kv_heads = positive("num_key_value_heads", a.n_heads);
    if (a.n_heads % a.n_kv_heads != 0)
        cfg.fail("num_key_value_heads", std::to_string(a.n_kv_heads) + " does not divide num_attention_heads " +
                                            std::to_string(a.n_heads));
    a.head_dim = positive("head_dim", 256);  // transformers' default for both families
    a.norm_eps = static_cast<float>(cfg.get_or<double>("rms_norm_eps", 1e-6));
    // partial_rotary_factor: in rope_parameters (transformers 5), else top level, else 0.25 (the BC default).
    double prf = cfg.get_or<double>("partial_rotary_factor", 0.25);
    if (auto rp = cfg.opt_sub("rope_parameters"); rp && rp->has("partial_rotary_factor"))
        prf = rp->get<double>("partial_rotary_factor");
    a.rope = make_rope_params(cfg, a.head_dim, static_cast<float>(prf));
    if (a.rope.rot_dim <= 0 || a.rope.rot_dim % 2 != 0 || a.rope.rot_dim > a.head_dim)
        cfg.fail("partial_rotary_factor", std::to_string(prf) + " gives a rotary width of " +
                                              std::to_string(a.rope.rot_dim) + " (must be even, 2.." +
                                              std::to_string(a.head_dim) + ")");
    // mrope_section / mrope_interleaved only matter for image positions; text positions are equal in t/h/w.

    c.linear.assign(static_cast<size_t>(c.n_layers), false);
    if (cfg.has("layer_types")) {
        const auto& lt = cfg.json()["layer_types"];
        if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c.n_layers)
            cfg.fail("layer_types", "must list num_hidden_layers = " + std::to_string(c.n_layers) + " entries");
        for (size_t i = 0; i < lt.size(); ++i) {
            if (lt[i] == "linear_attention")
                c.linear[i] = true;
            else if (lt[i] != "full_attention")
                cfg.unsupported("layer_types", "entry " + std::to_string(i) + " is " + lt[i].dump());
        }
    } else {  // transformers builds the list from the interval: every interval-th layer is full attention
        const int64_t every = positive("full_attention_interval", 4);
        for (int64_t i = 0; i < c.n_layers; ++i) c.linear[static_cast<size_t>(i)] = (i + 1) % every != 0;
    }

    GdnConfig& g = c.gdn;
    g.hidden = a.hidden;
    g.n_k_heads = positive("linear_num_key_heads", 16);
    g.n_v_heads = positive("linear_num_value_heads", 32);
    g.k_dim = positive("linear_key_head_dim", 128);
    g.v_dim = positive("linear_value_head_dim", 128);
    g.conv_kernel = positive("linear_conv_kernel_dim", 4);
    g.norm_eps = a.norm_eps;
    if (g.n_v_heads % g.n_k_heads != 0)
        cfg.fail("linear_num_value_heads", std::to_string(g.n_v_heads) + " is not a multiple of linear_num_key_heads " +
                                               std::to_string(g.n_k_heads));
    // Multimodal wrappers carry tie_word_embeddings at the top level (what transformers reads for them).
    c.tie_embeddings = root.has("tie_word_embeddings") ? root.get<bool>("tie_word_embeddings")
                                                       : cfg.get_or<bool>("tie_word_embeddings", false);
}

// ---- the hybrid decoder ----

class HybridDecoder final : public StackedDecoder {
public:
    HybridDecoder(Backend& be, const Checkpoint& ckpt, const QuantConfig& qc, const HybridConfig& c, ModelInfo info)
        : StackedDecoder(be, std::move(info)), c_(c) {
        WeightLoader wl(be, ckpt, qc, info_);
        const int64_t H = c.attn.hidden;
        load_embedding(wl, c.prefix, c.vocab, H);
        layers_.resize(static_cast<size_t>(c.n_layers));
        for (int64_t i = 0; i < c.n_layers; ++i) {
            const std::string p = c.prefix + "layers." + std::to_string(i) + ".";
            Layer& l = layers_[static_cast<size_t>(i)];
            l.linear = c.linear[static_cast<size_t>(i)];
            l.in_norm = wl.vector_f32(p + "input_layernorm.weight", H);
            if (l.linear)
                l.gdn = load_gdn(wl, p + "linear_attn", c.gdn, info_);
            else
                l.attn = load_gated_attention(wl, p + "self_attn", c.attn);
            l.post_norm = wl.vector_f32(p + "post_attention_layernorm.weight", H);
            l.mlp = load_mlp(wl, p + "mlp", H, c.intermediate, false);
        }
        load_head(wl, c.prefix, c.vocab, H, c.tie_embeddings);
        load_mtp(wl);
    }

    std::unique_ptr<SequenceState> new_state(int64_t max_ctx) override {
        Backend& be = *be_;
        auto st = std::make_unique<SequenceState>(be, max_ctx);
        auto kv = [&](LayerState& l) {
            l.k_cache = be.alloc_persistent(be.act_dtype(), {max_ctx, c_.attn.n_kv_heads, c_.attn.head_dim});
            l.v_cache = be.alloc_persistent(be.act_dtype(), {max_ctx, c_.attn.n_kv_heads, c_.attn.head_dim});
        };
        st->layers.resize(layers_.size());
        for (size_t i = 0; i < layers_.size(); ++i) {
            LayerState& l = st->layers[i];
            if (!layers_[i].linear) {
                kv(l);
                continue;
            }
            const GdnConfig& g = c_.gdn;
            l.conv_state = be.alloc_persistent(be.act_dtype(), {g.conv_kernel - 1, g.conv_channels()});
            l.recurrent_state = be.alloc_persistent(DType::F32, {g.n_v_heads, g.k_dim, g.v_dim});
        }
        st->extra_layers.resize(mtp_ ? mtp_->layers.size() : 0);  // the MTP layers' own KV caches
        for (LayerState& l : st->extra_layers) kv(l);
        return st;
    }

    Body body(SequenceState& st, std::span<const int32_t> tokens, int64_t n_logits) override {
        Backend& be = *be_;
        const int64_t n_past = st.n_past;
        ForwardInputs in = begin_forward(be, st, tokens, n_logits, embed_);
        StackOps ops;
        ops.in_norm = [&](size_t i) -> const Tensor& { return layers_[i].in_norm; };
        ops.post_norm = [&](size_t i) -> const Tensor& { return layers_[i].post_norm; };
        ops.mixer = [&](size_t i, const Tensor& h, Tensor& y) {
            const Layer& l = layers_[i];
            if (l.linear)
                gdn_forward(be, l.gdn, c_.gdn, h, st.layers[i], y);
            else
                gated_attention_forward(be, l.attn, c_.attn, h, in.positions, st.layers[i], n_past, y);
        };
        ops.mlp = [&](size_t i, const Tensor& h, Tensor& y) { mlp_forward(be, layers_[i].mlp, h, y); };
        ops.norm_mlp = [&](size_t i, Tensor& x, const Tensor& w, float eps, NormKind kind, Tensor& y) {
            return norm_mlp_forward(be, layers_[i].mlp, x, w, eps, kind, y);
        };
        run_stack(in.x, layers_.size(), c_.attn.norm_eps, NormKind::PLUS_ONE, ops);
        st.n_past += static_cast<int64_t>(tokens.size());
        return {in.x, c_.attn.norm_eps, NormKind::PLUS_ONE};
    }

    const MtpWeights* mtp() const { return mtp_.get(); }

private:
    // mtp.* (every mtp.layers.N present), kept for the MTP proposer; the layers are always full attention.
    void load_mtp(WeightLoader& wl) {
        if (!wl.has("mtp.fc.weight")) return;
        const int64_t H = c_.attn.hidden;
        mtp_ = std::make_unique<MtpWeights>();
        mtp_->fc = wl.linear("mtp.fc", 2 * H, H, false);
        mtp_->pre_fc_norm_embedding = wl.vector_f32("mtp.pre_fc_norm_embedding.weight", H);
        mtp_->pre_fc_norm_hidden = wl.vector_f32("mtp.pre_fc_norm_hidden.weight", H);
        mtp_->norm = wl.vector_f32("mtp.norm.weight", H);
        for (int i = 0; wl.has("mtp.layers." + std::to_string(i) + ".input_layernorm.weight"); ++i) {
            const std::string p = "mtp.layers." + std::to_string(i) + ".";
            MtpLayer l;
            l.input_norm = wl.vector_f32(p + "input_layernorm.weight", H);
            l.post_norm = wl.vector_f32(p + "post_attention_layernorm.weight", H);
            l.attn = load_gated_attention(wl, p + "self_attn", c_.attn);
            l.mlp = load_mlp(wl, p + "mlp", H, c_.intermediate, false);
            mtp_->layers.push_back(std::move(l));
        }
        if (mtp_->layers.empty())
            throw Error(wl.checkpoint().dir() + ": tensor 'mtp.layers.0.input_layernorm.weight' not found (mtp.fc "
                        "is present, so the MTP head is incomplete)");
    }

    struct Layer {
        bool linear = false;
        Tensor in_norm, post_norm;  // [H] F32, (1+w)
        GatedAttentionWeights attn;
        GdnWeights gdn;
        MlpWeights mlp;
    };
    HybridConfig c_;
    std::vector<Layer> layers_;
    std::unique_ptr<MtpWeights> mtp_;
};

std::unique_ptr<Model> make_hybrid_decoder(Backend& be, const Checkpoint& ckpt, const QuantConfig& qc,
                                           const HybridConfig& c, ModelInfo info) {
    return std::make_unique<HybridDecoder>(be, ckpt, qc, c, std::move(info));
}

const MtpWeights* hybrid_mtp_weights(const Model& m) {
    const auto* h = dynamic_cast<const HybridDecoder*>(&m);
    return h ? h->mtp() : nullptr;
}

}  // namespace grimoire
