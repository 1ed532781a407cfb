#include "model/layers.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/rope_params.h"
#include "quant/formats.h"
#include "sample/sampler.h"

namespace grimoire {

// ---- WeightLoader ----

const TensorInfo& WeightLoader::expect(const std::string& name, const std::vector<int64_t>& shape) const {
    const TensorInfo& t = ckpt_.get(name);  // throws naming the directory and tensor
    if (t.shape != shape)
        throw Error(t.file + ": tensor '" + name + "': expected shape " + shape_str(shape) + ", found " +
                    shape_str(t.shape));
    return t;
}

void WeightLoader::count(int64_t params, size_t bytes) {
    info_.n_params += params;
    info_.weight_bytes += bytes;
}

Tensor WeightLoader::matrix(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo& t = expect(name, shape);
    Tensor out = be_.upload(t, dense_weight_dtype(be_, t.dtype));
    count(t.numel(), out.nbytes());
    return out;
}

Tensor WeightLoader::vector_f32(const std::string& name, int64_t n) {
    const TensorInfo& t = expect(name, {n});
    Tensor out = be_.upload(t, DType::F32);
    count(t.numel(), out.nbytes());
    return out;
}

std::unique_ptr<Linear> WeightLoader::linear(const std::string& prefix, int64_t in, int64_t out, bool bias,
                                             WeightRole role) {
    if (bias && !ckpt_.has(prefix + ".bias"))
        throw Error(ckpt_.dir() + ": tensor '" + prefix + ".bias' not found (the config asks for a bias)");
    if (role != WeightRole::OTHER) {  // a quantized weight through its host form, to carry the hint
        if (std::optional<QuantHost> h = quantized(prefix, in, out, bias)) {
            h->role = role;
            return quantized_linear(std::move(*h));
        }
    }
    auto lin = load_linear(be_, ckpt_, prefix, qc_, bias);
    if (lin->in_features() != in || lin->out_features() != out)
        throw Error(ckpt_.dir() + ": linear '" + prefix + "': expected [out, in] = " + shape_str({out, in}) +
                    ", found " + shape_str({lin->out_features(), lin->in_features()}));
    count(in * out + (bias ? out : 0), lin->weight_bytes());
    ++info_.linear_formats[lin->format()];
    return lin;
}

Tensor WeightLoader::stacked(const std::vector<std::string>& prefixes, int64_t in, const std::vector<int64_t>& outs) {
    std::vector<const TensorInfo*> parts;
    int64_t rows = 0;
    size_t bytes = 0;
    for (size_t i = 0; i < prefixes.size(); ++i) {
        const std::string& p = prefixes[i];
        const TensorInfo* w = ckpt_.find(p + ".weight");
        if (!w || ckpt_.has(p + ".bias") || ckpt_.has(p + ".weight_scale") || ckpt_.has(p + ".weight_scale_inv") ||
            w->shape.size() != 2)
            return Tensor{};
        if (w->dtype != DType::BF16 && w->dtype != DType::F16 && w->dtype != DType::F32) return Tensor{};
        if (!parts.empty() && w->dtype != parts[0]->dtype) return Tensor{};
        if (w->shape != std::vector<int64_t>{outs[i], in}) return Tensor{};  // linear() reports the mismatch
        parts.push_back(w);
        rows += outs[i];
        bytes += w->nbytes;
    }
    TensorInfo all = *parts[0];
    all.name = prefixes[0] + ".weight (stacked with " + std::to_string(parts.size() - 1) + " more)";
    all.shape = {rows, in};
    all.nbytes = bytes;
    std::vector<uint8_t> host;
    if (!be_.random_weights()) {  // random weights are generated on the device: nothing to read
        host.resize(bytes);
        size_t off = 0;
        for (const TensorInfo* w : parts) {
            std::memcpy(host.data() + off, w->data, w->nbytes);
            off += w->nbytes;
        }
        all.data = host.data();
    }
    Tensor t = be_.upload(all, dense_weight_dtype(be_, all.dtype));
    count(rows * in, t.nbytes());
    info_.linear_formats[std::string(dtype_name(t.dtype))] += static_cast<int64_t>(parts.size());
    return t;
}

std::optional<QuantHost> WeightLoader::quantized(const std::string& prefix, int64_t in, int64_t out, bool bias) {
    if (bias && !ckpt_.has(prefix + ".bias"))
        throw Error(ckpt_.dir() + ": tensor '" + prefix + ".bias' not found (the config asks for a bias)");
    std::optional<QuantHost> h = read_quantized(be_, ckpt_, prefix, qc_, bias);
    if (h && (h->K() != in || h->N() != out))
        throw Error(ckpt_.dir() + ": linear '" + prefix + "': expected [out, in] = " + shape_str({out, in}) +
                    ", found " + shape_str({h->N(), h->K()}));
    if (h) ++info_.linear_formats[h->format];  // counted here, per part; quantized_linear may stack parts
    return h;
}

std::unique_ptr<Linear> WeightLoader::quantized_linear(QuantHost h) {
    const int64_t in = h.K(), out = h.N();
    const bool bias = !h.bias.empty();
    auto lin = make_quantized_linear(be_, std::move(h));
    count(in * out + (bias ? out : 0), lin->weight_bytes());
    return lin;
}

ProjGroup::ProjGroup(std::vector<std::unique_ptr<Linear>> units, std::vector<int64_t> widths)
    : widths_(std::move(widths)) {
    size_t part = 0;
    for (auto& lin : units) {
        Unit u{std::move(lin), part, 0};
        int64_t covered = 0;
        while (covered < u.lin->out_features() && part < widths_.size()) covered += widths_[part++], ++u.count;
        GRIMOIRE_CHECK(covered == u.lin->out_features() && u.count > 0, "ProjGroup: unit widths do not add up");
        units_.push_back(std::move(u));
    }
    GRIMOIRE_CHECK(part == widths_.size(), "ProjGroup: units do not cover every part");
}

namespace {
std::vector<std::unique_ptr<Linear>> one(std::unique_ptr<Linear> lin) {
    std::vector<std::unique_ptr<Linear>> v;
    v.push_back(std::move(lin));
    return v;
}
}  // namespace

ProjGroup::ProjGroup(const Backend& be, Tensor stacked, std::vector<int64_t> widths)
    : ProjGroup(one(make_dense_linear(be, stacked, Tensor{})), std::move(widths)) {}

ProjGroup::ProjGroup(std::vector<std::unique_ptr<Linear>> parts) {
    for (auto& p : parts) {
        widths_.push_back(p->out_features());
        units_.push_back(Unit{std::move(p), widths_.size() - 1, 1});
    }
}

std::vector<Tensor> ProjGroup::forward(Backend& be, const Tensor& x, size_t n_units) const {
    const int64_t T = x.rows();
    const DType act = be.act_dtype();
    std::vector<Tensor> outs;
    for (size_t ui = 0; ui < units_.size() && ui < n_units; ++ui) {
        const Unit& u = units_[ui];
        if (u.count == 1) {
            outs.push_back(be.scratch(act, {T, widths_[u.first]}));
            u.lin->forward(be, x, outs.back());
        } else if (T == 1) {  // one token: the parts are contiguous column ranges of the unit's output
            Tensor y = be.scratch(act, {1, u.lin->out_features()});
            u.lin->forward(be, x, y);
            int64_t c0 = 0;
            for (size_t i = u.first; i < u.first + u.count; ++i) {
                outs.emplace_back(static_cast<uint8_t*>(y.data) + static_cast<size_t>(c0) * dtype_size(act), act,
                                  y.device, std::initializer_list<int64_t>{1, widths_[i]});
                c0 += widths_[i];
            }
        } else {
            const size_t first = outs.size();
            for (size_t i = u.first; i < u.first + u.count; ++i) outs.push_back(be.scratch(act, {T, widths_[i]}));
            u.lin->forward_split(be, x, std::span<Tensor>(outs.data() + first, u.count));
        }
    }
    return outs;
}

std::vector<Tensor> ProjGroup::forward_conv(Backend& be, const Tensor& x, size_t n_units, const Tensor& conv_w,
                                            Tensor& conv_state, bool* fused) const {
    const int64_t T = x.rows();
    const DType act = be.act_dtype();
    GRIMOIRE_CHECK(!units_.empty() && n_units >= 1, "forward_conv: no projection");
    const Unit& u0 = units_[0];
    const bool one = u0.lin->offers_conv(T, conv_w, conv_state);
    if (fused) *fused = one;
    if (!one) {
        std::vector<Tensor> outs = forward(be, x, n_units);
        Tensor c = be.scratch(act, {T, widths_[0]});
        be.conv1d_silu(outs[0], conv_w, conv_state, c);
        outs[0] = c;
        return outs;
    }
    std::vector<Tensor> outs;
    for (size_t i = u0.first; i < u0.first + u0.count; ++i) outs.push_back(be.scratch(act, {T, widths_[i]}));
    // The other units first: the op after unit 0's is then the consumer's, as in the unfused order.
    for (size_t ui = 1; ui < units_.size() && ui < n_units; ++ui) {
        const Unit& u = units_[ui];
        const size_t first = outs.size();
        for (size_t i = u.first; i < u.first + u.count; ++i) outs.push_back(be.scratch(act, {T, widths_[i]}));
        if (u.count == 1)
            u.lin->forward(be, x, outs[first]);
        else
            u.lin->forward_split(be, x, std::span<Tensor>(outs.data() + first, u.count));
    }
    u0.lin->forward_split_conv(be, x, std::span<Tensor>(outs.data(), u0.count), conv_w, conv_state);
    return outs;
}

namespace {

bool quant_stacking_enabled() {
    static const bool on = [] {
        const char* v = std::getenv("GRIMOIRE_STACK_QUANT");
        return !(v && std::string(v) == "0");
    }();
    return on;
}

}  // namespace

ProjGroup load_proj_group(WeightLoader& wl, const std::vector<std::string>& prefixes, int64_t in,
                          const std::vector<int64_t>& outs, bool bias, WeightRole role) {
    if (!bias)
        if (Tensor s = wl.stacked(prefixes, in, outs); s.data) return ProjGroup(wl.backend(), s, outs);
    const size_t n = prefixes.size();
    std::vector<std::optional<QuantHost>> q(n);
    for (size_t i = 0; i < n; ++i) q[i] = wl.quantized(prefixes[i], in, outs[i], bias);
    // Runs of consecutive parts that stack: quantized ones that agree (can_stack), plain float ones through
    // WeightLoader::stacked (e.g. the BF16 DeltaNet b | a beside a quantized qkv | z); the rest one by one.
    std::vector<std::unique_ptr<Linear>> units;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        if (q[i]) {
            while (quant_stacking_enabled() && j < n && q[j] && can_stack(*q[j - 1], *q[j])) ++j;
            std::vector<QuantHost> run;
            for (size_t k = i; k < j; ++k) run.push_back(std::move(*q[k]));
            QuantHost unit = stack_quantized(std::move(run));
            if (i == 0 && j == n) unit.role = role;
            units.push_back(wl.quantized_linear(std::move(unit)));
        } else {
            while (j < n && !q[j]) ++j;
            const std::vector<std::string> sub(prefixes.begin() + static_cast<std::ptrdiff_t>(i),
                                               prefixes.begin() + static_cast<std::ptrdiff_t>(j));
            const std::vector<int64_t> sub_outs(outs.begin() + static_cast<std::ptrdiff_t>(i),
                                                outs.begin() + static_cast<std::ptrdiff_t>(j));
            Tensor s = !bias && j - i > 1 ? wl.stacked(sub, in, sub_outs) : Tensor{};
            if (s.data) {
                units.push_back(make_dense_linear(wl.backend(), s, Tensor{}));
            } else {
                for (size_t k = i; k < j; ++k) units.push_back(wl.linear(prefixes[k], in, outs[k], bias));
            }
        }
        i = j;
    }
    return ProjGroup(std::move(units), outs);
}

// ---- attention ----

AttentionWeights load_attention(WeightLoader& wl, const std::string& prefix, const AttentionConfig& c) {
    AttentionWeights w;
    const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
    w.qkv = load_proj_group(wl, {prefix + ".q_proj", prefix + ".k_proj", prefix + ".v_proj"}, c.hidden,
                            {q_dim, kv_dim, kv_dim}, c.qkv_bias);
    w.o = wl.linear(prefix + ".o_proj", q_dim, c.hidden, c.o_bias);
    if (c.qk_norm) {
        w.q_norm = wl.vector_f32(prefix + ".q_norm.weight", c.head_dim);
        w.k_norm = wl.vector_f32(prefix + ".k_norm.weight", c.head_dim);
    }
    return w;
}

void attention_forward(Backend& be,
                       const AttentionWeights& w,
                       const AttentionConfig& c,
                       const Tensor& x,
                       const Tensor& positions,
                       LayerState& st,
                       int64_t n_past,
                       Tensor& out) {
    const int64_t T = x.rows(), D = c.head_dim;
    const DType act = be.act_dtype();
    std::vector<Tensor> qkv = w.qkv.forward(be, x);
    Tensor &q = qkv[0], &k = qkv[1], &v = qkv[2];
    Tensor q3 = q.view({T, c.n_heads, D}), k3 = k.view({T, c.n_kv_heads, D}),
           v3 = v.view({T, c.n_kv_heads, D});
    if (c.qk_norm) {
        // Qwen3 normalises each head's vector (over D) before RoPE.
        Tensor qr = q.view({T * c.n_heads, D}), kr = k.view({T * c.n_kv_heads, D});
        be.rmsnorm(qr, w.q_norm, c.norm_eps, NormKind::PLAIN, qr);
        be.rmsnorm(kr, w.k_norm, c.norm_eps, NormKind::PLAIN, kr);
    }
    be.rope(q3, positions, c.rope);
    be.rope(k3, positions, c.rope);
    Tensor att = be.scratch(act, {T, c.n_heads, D});
    be.attention(q3, k3, v3, st.k_cache, st.v_cache, n_past, 1.0f / std::sqrt(static_cast<float>(D)), att);
    Tensor att2 = att.view({T, c.n_heads * D});
    w.o->forward(be, att2, out);
}

// ---- MLP ----

MlpWeights load_mlp(
    WeightLoader& wl, const std::string& prefix, int64_t hidden, int64_t intermediate, bool bias) {
    MlpWeights w;
    w.gate_up = load_proj_group(wl, {prefix + ".gate_proj", prefix + ".up_proj"}, hidden,
                                {intermediate, intermediate}, bias, WeightRole::GLU_GATE_UP);
    w.down = wl.linear(prefix + ".down_proj", intermediate, hidden, bias, WeightRole::MLP_DOWN);
    return w;
}

void mlp_forward(Backend& be, const MlpWeights& w, const Tensor& x, Tensor& out) {
    if (w.gate_up.n_units() == 1 && w.gate_up.is_stacked() &&
        (w.gate_up.unit(0).offers_mlp(x.rows(), *w.down) || w.gate_up.unit(0).offers_glu(x.rows()))) {
        w.gate_up.unit(0).forward_mlp(be, x, *w.down, out);  // the block in one pass, or gate | up in one pass
        return;
    }
    std::vector<Tensor> gu = w.gate_up.forward(be, x);
    Tensor &g = gu[0], &u = gu[1];
    be.silu_mul(g, u, g);
    w.down->forward(be, g, out);
}

bool norm_mlp_forward(Backend& be, const MlpWeights& w, Tensor& res, const Tensor& norm_w, float eps, NormKind kind,
                      Tensor& y) {
    if (w.gate_up.n_units() != 1 || !w.gate_up.is_stacked() || !w.gate_up.unit(0).offers_norm_mlp(res.rows(), *w.down))
        return false;
    w.gate_up.unit(0).forward_norm_mlp(be, res, y, norm_w, eps, kind, *w.down, y);
    return true;
}

// ---- forward ends ----

ForwardInputs begin_forward(Backend& be,
                            const SequenceState& st,
                            std::span<const int32_t> tokens,
                            int64_t n_logits,
                            const Tensor& embed) {
    const int64_t T = static_cast<int64_t>(tokens.size()), vocab = embed.dim(0), n_past = st.n_past;
    GRIMOIRE_CHECK(T > 0 && n_logits >= 0 && n_logits <= T, "forward: bad token / logit counts");
    if (n_past + T > st.max_ctx())
        throw Error("context length exceeded: " + std::to_string(n_past + T) + " tokens > " +
                    std::to_string(st.max_ctx()));
    for (int32_t id : tokens)
        if (id < 0 || id >= vocab)
            throw Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                        std::to_string(vocab) + ")");
    be.reset_scratch();
    ForwardInputs in;
    Tensor ids = be.scratch(DType::I32, {T});
    be.from_host(ids, tokens.data());
    std::vector<int32_t> pos_host(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) pos_host[static_cast<size_t>(t)] = static_cast<int32_t>(n_past + t);
    in.positions = be.scratch(DType::I32, {T});
    be.from_host(in.positions, pos_host.data());
    in.x = be.scratch(be.act_dtype(), {T, embed.dim(1)});
    be.embedding(embed, ids, in.x);
    return in;
}

int64_t logit_chunks(int64_t vocab, int64_t n_logits) {
    static const int64_t forced = [] {
        const char* e = std::getenv("GRIMOIRE_LOGIT_CHUNKS");
        return e ? std::max<int64_t>(1, std::strtoll(e, nullptr, 10)) : int64_t{0};
    }();
    if (forced) return forced;
    if (n_logits > 16) return 1;  // prompts' logits: one GEMM
    return vocab >= 131072 ? 4 : vocab >= 65536 ? 2 : 1;
}

namespace {
// The final norm of the last n rows of x [T, H]: only they need it and the (vocab-sized) lm_head.
Tensor final_norm_rows(Backend& be, const Tensor& x, const Tensor& norm_w, float eps, NormKind kind, int64_t n) {
    Tensor last = x.row_slice(x.rows() - n, n);
    Tensor hn = be.scratch(be.act_dtype(), {n, x.cols()});
    be.rmsnorm(last, norm_w, eps, kind, hn);
    return hn;
}
}  // namespace

void final_logits(Backend& be,
                  const Tensor& x,
                  const Tensor& norm_w,
                  float eps,
                  NormKind kind,
                  const Linear& lm_head,
                  int64_t n_logits,
                  std::vector<float>& logits,
                  int64_t chunks) {
    const int64_t V = lm_head.out_features();
    const DType act = be.act_dtype();
    logits.resize(static_cast<size_t>(n_logits * V));
    if (n_logits == 0) return;
    const Tensor hn = final_norm_rows(be, x, norm_w, eps, kind, n_logits);
    const Tensor* w = lm_head.plain_weight();
    if (chunks <= 0) chunks = logit_chunks(V, n_logits);
    if (w && act != DType::F32 && chunks > 1) {
        // The vocabulary in chunks of rows of the plain weight, each copied to the host as soon as its GEMV is
        // done and widened there while the device computes the next: of the host's copy-out and widening
        // (~0.15 ms a row on the 27B's 248320 entries, more than the D2H) only the last chunk's is left after
        // the lm_head. Each logit is the same dot product either way.
        const size_t esz = dtype_size(act);
        auto* raw = static_cast<uint8_t*>(be.host_staging(static_cast<size_t>(n_logits * V) * esz));
        const int64_t rows = (V + chunks - 1) / chunks;
        const int64_t step = (rows + 255) / 256 * 256;  // keeps every chunk's rows 512-byte aligned
        struct Chunk {
            int64_t r0, n;
            int ticket;
        };
        std::vector<Chunk> parts;
        for (int64_t r0 = 0; r0 < V; r0 += step) {
            const int64_t n = std::min(step, V - r0);
            Tensor oc = be.scratch(act, {n_logits, n});
            be.matmul(hn, w->row_slice(r0, n), oc);
            parts.push_back({r0, n, be.to_host_async(oc, raw + static_cast<size_t>(n_logits * r0) * esz)});
        }
        for (const Chunk& c : parts) {
            be.wait_host(c.ticket);
            const uint8_t* src = raw + static_cast<size_t>(n_logits * c.r0) * esz;
            for (int64_t t = 0; t < n_logits; ++t)
                convert_to_f32(act, src + static_cast<size_t>(t * c.n) * esz,
                               logits.data() + static_cast<size_t>(t * V + c.r0), static_cast<size_t>(c.n));
        }
        return;
    }
    Tensor out = be.scratch(act, {n_logits, V});
    lm_head.forward(be, hn, out);
    if (act == DType::F32) {
        be.to_host(out, logits.data());
    } else {
        // Through the backend's reused staging buffer (page-locked on CUDA: one DMA; a fresh 0.5 MB vector per
        // decode step was mapped, faulted in and zeroed anew), then widened on the host.
        void* raw = be.host_staging(static_cast<size_t>(out.nbytes()));
        be.to_host(out, raw);
        convert_to_f32(act, raw, logits.data(), logits.size());
    }
}

void final_greedy(Backend& be,
                  const Tensor& x,
                  const Tensor& norm_w,
                  float eps,
                  NormKind kind,
                  const Linear& lm_head,
                  int64_t n_rows,
                  std::vector<int32_t>& ids) {
    ids.resize(static_cast<size_t>(n_rows));
    if (n_rows == 0) return;
    const Tensor hn = final_norm_rows(be, x, norm_w, eps, kind, n_rows);
    Tensor out = be.scratch(be.act_dtype(), {n_rows, lm_head.out_features()});
    lm_head.forward(be, hn, out);
    Tensor idt = be.scratch(DType::I32, {n_rows});
    be.argmax(out, idt);
    be.to_host(idt, ids.data());
}

void Model::forward_greedy(SequenceState& state, std::span<const int32_t> tokens, int64_t n_rows,
                           std::vector<int32_t>& ids) {
    std::vector<float> logits;
    forward(state, tokens, n_rows, logits);
    const int64_t V = info_.vocab_size;
    ids.resize(static_cast<size_t>(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) ids[static_cast<size_t>(r)] = argmax(logits.data() + r * V, V);
}

// ---- StackedDecoder ----

StackedDecoder::StackedDecoder(Backend& be, ModelInfo info) {
    be_ = &be;
    info_ = std::move(info);
    info_.n_params = 0;
    info_.weight_bytes = 0;
}

void StackedDecoder::load_embedding(WeightLoader& wl, const std::string& prefix, int64_t vocab, int64_t hidden) {
    embed_ = wl.matrix(prefix + "embed_tokens.weight", {vocab, hidden});
}

void StackedDecoder::load_head(WeightLoader& wl, const std::string& prefix, int64_t vocab, int64_t hidden,
                               bool tie) {
    final_norm_ = wl.vector_f32(prefix + "norm.weight", hidden);
    // Published tied checkpoints omit lm_head.weight; some keep a copy anyway, which we then ignore.
    if (tie || !wl.has("lm_head.weight"))
        lm_head_ = make_dense_linear(*be_, embed_, Tensor{});
    else
        lm_head_ = wl.linear("lm_head", hidden, vocab, false);
}

void StackedDecoder::run_stack(Tensor& x, size_t n, float eps, NormKind kind, const StackOps& ops) const {
    Backend& be = *be_;
    const int64_t T = x.rows(), H = x.cols();
    Tensor h = be.scratch(be.act_dtype(), {T, H}), y = be.scratch(be.act_dtype(), {T, H});
    if (n == 0) return;
    be.rmsnorm(x, ops.in_norm(0), eps, kind, h);
    // Each add_rmsnorm is followed by a projection: the mixer's and the MLP's first op is a Linear forward.
    for (size_t i = 0; i < n; ++i) {
        ops.mixer(i, h, y);
        const bool fused = ops.norm_mlp && ops.norm_mlp(i, x, ops.post_norm(i), eps, kind, y);
        if (!fused) {
            be.linear_follows();
            be.add_rmsnorm(x, y, ops.post_norm(i), eps, kind, h);
            ops.mlp(i, h, y);
        }
        if (i + 1 < n) {
            // The launch-ahead hint lets add_rmsnorm read the residual before waiting on its predecessor, which
            // holds only while the residual was written kernels earlier: after a fused norm + MLP the block's
            // own launch, the predecessor, wrote it.
            if (!fused) be.linear_follows();
            be.add_rmsnorm(x, y, ops.in_norm(i + 1), eps, kind, h);
        } else
            be.add(x, y, x);
    }
}

// ---- DenseDecoder ----

namespace {

class DenseDecoder final : public StackedDecoder {
  public:
    DenseDecoder(Backend& be,
                 const Checkpoint& ckpt,
                 const QuantConfig& qc,
                 const DenseDecoderConfig& c,
                 ModelInfo info)
        : StackedDecoder(be, std::move(info)), c_(c) {
        WeightLoader wl(be, ckpt, qc, info_);
        const int64_t H = c.attn.hidden;
        load_embedding(wl, c.prefix, c.vocab, H);
        layers_.resize(static_cast<size_t>(c.n_layers));
        for (int64_t i = 0; i < c.n_layers; ++i) {
            const std::string p = c.prefix + "layers." + std::to_string(i) + ".";
            Layer& l = layers_[static_cast<size_t>(i)];
            l.attn_norm = wl.vector_f32(p + "input_layernorm.weight", H);
            l.attn = load_attention(wl, p + "self_attn", c.attn);
            l.mlp_norm = wl.vector_f32(p + "post_attention_layernorm.weight", H);
            l.mlp = load_mlp(wl, p + "mlp", H, c.intermediate, c.mlp_bias);
        }
        load_head(wl, c.prefix, c.vocab, H, c.tie_embeddings);
    }

    std::unique_ptr<SequenceState> new_state(int64_t max_ctx) override {
        auto st = std::make_unique<SequenceState>(*be_, max_ctx);
        st->layers.resize(layers_.size());
        for (auto& l : st->layers) {
            l.k_cache =
                be_->alloc_persistent(be_->act_dtype(), {max_ctx, c_.attn.n_kv_heads, c_.attn.head_dim});
            l.v_cache =
                be_->alloc_persistent(be_->act_dtype(), {max_ctx, c_.attn.n_kv_heads, c_.attn.head_dim});
        }
        return st;
    }

    Body body(SequenceState& st, std::span<const int32_t> tokens, int64_t n_logits) override {
        Backend& be = *be_;
        const int64_t n_past = st.n_past;
        ForwardInputs in = begin_forward(be, st, tokens, n_logits, embed_);
        StackOps ops;
        ops.in_norm = [&](size_t i) -> const Tensor& { return layers_[i].attn_norm; };
        ops.post_norm = [&](size_t i) -> const Tensor& { return layers_[i].mlp_norm; };
        ops.mixer = [&](size_t i, const Tensor& h, Tensor& y) {
            attention_forward(be, layers_[i].attn, c_.attn, h, in.positions, st.layers[i], n_past, y);
        };
        ops.mlp = [&](size_t i, const Tensor& h, Tensor& y) { mlp_forward(be, layers_[i].mlp, h, y); };
        ops.norm_mlp = [&](size_t i, Tensor& x, const Tensor& w, float eps, NormKind kind, Tensor& y) {
            return norm_mlp_forward(be, layers_[i].mlp, x, w, eps, kind, y);
        };
        run_stack(in.x, layers_.size(), c_.attn.norm_eps, NormKind::PLAIN, ops);
        st.n_past += static_cast<int64_t>(tokens.size());
        return {in.x, c_.attn.norm_eps, NormKind::PLAIN};
    }

  private:
    struct Layer {
        Tensor attn_norm, mlp_norm;  // [H] F32
        AttentionWeights attn;
        MlpWeights mlp;
    };
    DenseDecoderConfig c_;
    std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_dense_decoder(
    Backend& be, const Checkpoint& ckpt, const QuantConfig& qc, const DenseDecoderConfig& c, ModelInfo info) {
    return std::make_unique<DenseDecoder>(be, ckpt, qc, c, std::move(info));
}

void read_dense_decoder_config(const ConfigReader& cfg, DenseDecoderConfig& c) {
    const std::string act = cfg.get_or<std::string>("hidden_act", "silu");
    if (act != "silu" && act != "swish") cfg.unsupported("hidden_act", "only silu (SwiGLU) is implemented");
    if (cfg.get_or<bool>("use_sliding_window", false))
        cfg.unsupported("use_sliding_window", "sliding-window attention is not implemented");
    if (cfg.has("layer_types"))
        for (const auto& t : cfg.json()["layer_types"])
            if (t != "full_attention")
                cfg.unsupported("layer_types", "only full_attention layers are implemented");

    auto positive = [&](const char* key) {
        const auto v = cfg.get<int64_t>(key);
        if (v <= 0) cfg.fail(key, std::to_string(v) + " must be positive");
        return v;
    };
    c.vocab = positive("vocab_size");
    c.n_layers = positive("num_hidden_layers");
    c.intermediate = positive("intermediate_size");
    AttentionConfig& a = c.attn;
    a.hidden = positive("hidden_size");
    a.n_heads = positive("num_attention_heads");
    a.n_kv_heads = cfg.has("num_key_value_heads") ? positive("num_key_value_heads") : a.n_heads;
    if (a.n_heads % a.n_kv_heads != 0)
        cfg.fail("num_key_value_heads", std::to_string(a.n_kv_heads) +
                                            " does not divide num_attention_heads " +
                                            std::to_string(a.n_heads));
    if (cfg.has("head_dim")) {
        a.head_dim = positive("head_dim");
    } else {
        if (a.hidden % a.n_heads != 0)
            cfg.fail("num_attention_heads", "does not divide hidden_size and there is no head_dim");
        a.head_dim = a.hidden / a.n_heads;
    }
    a.norm_eps = static_cast<float>(cfg.get_or<double>("rms_norm_eps", 1e-6));
    a.rope = make_rope_params(cfg, a.head_dim);  // partial_rotary_factor from the config (default 1)
    c.tie_embeddings = cfg.get_or<bool>("tie_word_embeddings", false);
}

}  // namespace grimoire
