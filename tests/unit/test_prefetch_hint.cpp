// The model's L2 prefetch hints (Linear::prefetch -> Backend::l2_prefetch, taken by the CUDA backend's DeltaNet
// step and gated attention decode: kernels/cuda/l2_prefetch.h). The model side, on the CPU backend: each mixer
// of the hybrid decoder hints its output projection exactly once a call, after its input projections ran and
// before the output projection's forward (so the hint is pending when the mixer's core op is recorded, the op
// the CUDA backend hands it to), for one token and for several; and hinting changes no value (the CPU backend
// ignores hints: the mixer's output equals the same call on weights that never hint).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "model/hybrid_layers.h"
#include "quant/formats.h"
#include "quant/linear.h"
#include "test_cpu_util.h"

namespace grimoire {
namespace {

using test::host;
using test::randn;

// A plain Linear that logs its prefetch hints and forwards into `log`.
class Logged final : public Linear {
  public:
    Logged(std::unique_ptr<Linear> inner, std::vector<std::string>* log) : inner_(std::move(inner)), log_(log) {}
    int64_t in_features() const override { return inner_->in_features(); }
    int64_t out_features() const override { return inner_->out_features(); }
    void forward(Backend& be, const Tensor& x, Tensor& y) const override {
        log_->push_back("forward");
        inner_->forward(be, x, y);
    }
    std::vector<float> dequantize() const override { return inner_->dequantize(); }
    std::string format() const override { return inner_->format(); }
    size_t weight_bytes() const override { return inner_->weight_bytes(); }
    void prefetch(Backend& be) const override {
        log_->push_back("prefetch");
        inner_->prefetch(be);
    }

  private:
    std::unique_ptr<Linear> inner_;
    std::vector<std::string>* log_;
};

std::unique_ptr<Linear> dense(CpuBackend& be, int64_t out, int64_t in, uint32_t seed) {
    const std::vector<float> w = randn(static_cast<size_t>(out * in), seed, 0.3f);
    return make_dense_linear(be, be.upload_raw(w.data(), DType::F32, {out, in}), Tensor{});
}

ProjGroup group(CpuBackend& be, int64_t in, const std::vector<int64_t>& outs, uint32_t seed) {
    std::vector<std::unique_ptr<Linear>> parts;
    for (int64_t o : outs) parts.push_back(dense(be, o, in, seed++));
    return ProjGroup(std::move(parts));
}

Tensor f32(CpuBackend& be, const std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return be.upload_raw(v.data(), DType::F32, shape);
}

TEST(PrefetchHint, DeltaNetHintsItsOutProjectionBeforeItRuns) {
    CpuBackend be;
    GdnConfig c;
    c.hidden = 16, c.n_k_heads = 1, c.n_v_heads = 2, c.k_dim = 8, c.v_dim = 8, c.conv_kernel = 4;
    const int64_t H = c.hidden, C = c.conv_channels(), Hv = c.n_v_heads, K = c.conv_kernel;
    std::vector<std::string> log;
    GdnWeights w[2];  // [0] logs its out_proj; [1] the same weights, plain
    for (int i = 0; i < 2; ++i) {
        w[i].in = group(be, H, {C, c.value_size(), Hv, Hv}, 10);
        w[i].conv = f32(be, randn(static_cast<size_t>(C * K), 20, 0.5f), {C, K});
        w[i].A_log = f32(be, randn(static_cast<size_t>(Hv), 21, 0.5f), {Hv});
        w[i].dt_bias = f32(be, randn(static_cast<size_t>(Hv), 22, 0.5f), {Hv});
        w[i].norm = f32(be, randn(static_cast<size_t>(c.v_dim), 23, 0.2f), {c.v_dim});
        w[i].out = dense(be, H, c.value_size(), 30);
    }
    w[0].out = std::make_unique<Logged>(std::move(w[0].out), &log);
    LayerState st[2];
    for (auto& s : st) {
        s.conv_state = be.alloc_persistent(DType::F32, {K - 1, C});
        s.recurrent_state = be.alloc_persistent(DType::F32, {Hv, c.k_dim, c.v_dim});
    }
    uint32_t seed = 40;
    for (int64_t T : {1, 3, 1}) {
        const std::vector<float> xv = randn(static_cast<size_t>(T * H), seed++);
        Tensor x = be.upload_raw(xv.data(), DType::F32, {T, H});
        std::vector<float> got[2];
        log.clear();  // only w[0] writes it
        for (int i = 0; i < 2; ++i) {
            Tensor out = be.alloc_persistent(DType::F32, {T, H});
            gdn_forward(be, w[i], c, x, st[i], out);
            got[i] = host(be, out);
            be.free_persistent(out);
        }
        EXPECT_EQ(log, (std::vector<std::string>{"prefetch", "forward"})) << "T " << T;
        EXPECT_EQ(got[0], got[1]) << "T " << T;
        be.reset_scratch();
    }
    for (auto& s : st) be.free_persistent(s.conv_state), be.free_persistent(s.recurrent_state);
}

TEST(PrefetchHint, GatedAttentionHintsItsOutProjectionBeforeItRuns) {
    CpuBackend be;
    AttentionConfig c;
    c.hidden = 16, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 8;
    c.rope.rot_dim = 4;
    c.rope.neox = true;
    c.rope.inv_freq = {1.0f, 0.01f};
    const int64_t H = c.hidden, D = c.head_dim, Hq = c.n_heads, Hkv = c.n_kv_heads, max_ctx = 16;
    std::vector<std::string> log;
    GatedAttentionWeights w[2];
    for (int i = 0; i < 2; ++i) {
        w[i].qkv = group(be, H, {2 * Hq * D, Hkv * D, Hkv * D}, 50);
        w[i].o = dense(be, H, Hq * D, 60);
        w[i].q_norm = f32(be, randn(static_cast<size_t>(D), 61, 0.2f), {D});
        w[i].k_norm = f32(be, randn(static_cast<size_t>(D), 62, 0.2f), {D});
    }
    w[0].o = std::make_unique<Logged>(std::move(w[0].o), &log);
    LayerState st[2];
    for (auto& s : st) {
        s.k_cache = be.alloc_persistent(DType::F32, {max_ctx, Hkv, D});
        s.v_cache = be.alloc_persistent(DType::F32, {max_ctx, Hkv, D});
    }
    int64_t n_past = 0;
    uint32_t seed = 70;
    for (int64_t T : {3, 1, 1}) {
        const std::vector<float> xv = randn(static_cast<size_t>(T * H), seed++);
        Tensor x = be.upload_raw(xv.data(), DType::F32, {T, H});
        std::vector<int32_t> pos(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(n_past + t);
        Tensor positions = be.upload_raw(pos.data(), DType::I32, {T});
        std::vector<float> got[2];
        log.clear();  // only w[0] writes it
        for (int i = 0; i < 2; ++i) {
            Tensor out = be.alloc_persistent(DType::F32, {T, H});
            gated_attention_forward(be, w[i], c, x, positions, st[i], n_past, out);
            got[i] = host(be, out);
            be.free_persistent(out);
        }
        EXPECT_EQ(log, (std::vector<std::string>{"prefetch", "forward"})) << "T " << T;
        EXPECT_EQ(got[0], got[1]) << "T " << T;
        n_past += T;
        be.reset_scratch();
    }
    for (auto& s : st) be.free_persistent(s.k_cache), be.free_persistent(s.v_cache);
}

}  // namespace
}  // namespace grimoire
