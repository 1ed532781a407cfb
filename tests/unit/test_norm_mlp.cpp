// The residual add + RMSNorm and the MLP block in one pass (model/layers.h norm_mlp_forward,
// Linear::forward_norm_mlp): the model side of the CUDA FP8 block's pre-norm, on the CPU backend.
// - Weights that do not offer it: norm_mlp_forward returns false and leaves res and y as they were, so run_stack
//   takes its add_rmsnorm + mlp_forward path.
// - Weights that offer it (a wrapper around a plain stacked gate | up that says so and runs Linear's default):
//   res and y (the output written over the input, as run_stack passes them) bit for bit what add_rmsnorm +
//   mlp_forward give, for both norm kinds.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <span>

#include "model/layers.h"
#include "quant/formats.h"
#include "quant/linear.h"
#include "test_cpu_util.h"

namespace grimoire {
namespace {

using test::host;
using test::randn;

// A stacked gate | up that offers the one-pass norm + MLP and runs Linear's default for it.
class OffersNormMlp final : public Linear {
  public:
    explicit OffersNormMlp(std::unique_ptr<Linear> inner) : inner_(std::move(inner)) {}
    int64_t in_features() const override { return inner_->in_features(); }
    int64_t out_features() const override { return inner_->out_features(); }
    void forward(Backend& be, const Tensor& x, Tensor& y) const override { inner_->forward(be, x, y); }
    void forward_split(Backend& be, const Tensor& x, std::span<Tensor> ys) const override {
        inner_->forward_split(be, x, ys);
    }
    std::vector<float> dequantize() const override { return inner_->dequantize(); }
    std::string format() const override { return inner_->format(); }
    size_t weight_bytes() const override { return inner_->weight_bytes(); }
    bool offers_norm_mlp(int64_t, const Linear&) const override { return true; }
    void forward_norm_mlp(Backend& be, Tensor& res, const Tensor& y, const Tensor& norm_w, float eps, NormKind kind,
                          const Linear& down, Tensor& out) const override {
        ++calls;
        Linear::forward_norm_mlp(be, res, y, norm_w, eps, kind, down, out);
    }
    mutable int calls = 0;

  private:
    std::unique_ptr<Linear> inner_;
};

struct Block {
    MlpWeights w;
    const OffersNormMlp* offer = nullptr;
};

// gate | up [2 I, D] stacked as one unit and down [D, I], F32 weights; `offer` wraps gate | up.
Block make_block(CpuBackend& be, int64_t D, int64_t I, bool offer) {
    const std::vector<float> gu = randn(2 * I * D, 11, 0.2f), dn = randn(D * I, 12, 0.2f);
    std::unique_ptr<Linear> g = make_dense_linear(be, be.upload_raw(gu.data(), DType::F32, {2 * I, D}), Tensor{});
    Block b;
    if (offer) {
        auto o = std::make_unique<OffersNormMlp>(std::move(g));
        b.offer = o.get();
        g = std::move(o);
    }
    std::vector<std::unique_ptr<Linear>> units;
    units.push_back(std::move(g));
    b.w.gate_up = ProjGroup(std::move(units), {I, I});
    b.w.down = make_dense_linear(be, be.upload_raw(dn.data(), DType::F32, {D, I}), Tensor{});
    return b;
}

TEST(NormMlp, NotOfferedLeavesEverythingAlone) {
    CpuBackend be;
    const int64_t D = 24, I = 40;
    Block b = make_block(be, D, I, false);
    ASSERT_TRUE(b.w.gate_up.is_stacked());
    const std::vector<float> rv = randn(D, 1, 2.0f), yv = randn(D, 2), wv = randn(D, 3);
    Tensor res = be.upload_raw(rv.data(), DType::F32, {1, D}), y = be.upload_raw(yv.data(), DType::F32, {1, D});
    Tensor w = be.upload_raw(wv.data(), DType::F32, {D});
    EXPECT_FALSE(norm_mlp_forward(be, b.w, res, w, 1e-6f, NormKind::PLAIN, y));
    EXPECT_EQ(host(be, res), rv);
    EXPECT_EQ(host(be, y), yv);
}

TEST(NormMlp, OfferedEqualsAddRmsnormThenMlp) {
    CpuBackend be;
    const int64_t D = 24, I = 40;
    Block b = make_block(be, D, I, true);
    for (NormKind kind : {NormKind::PLAIN, NormKind::PLUS_ONE}) {
        for (int64_t T : {1, 3}) {
            const std::vector<float> rv = randn(T * D, 4, 2.0f), yv = randn(T * D, 5), wv = randn(D, 6, 0.5f);
            Tensor w = be.upload_raw(wv.data(), DType::F32, {D});
            // The reference: run_stack's unfused path.
            Tensor res_a = be.upload_raw(rv.data(), DType::F32, {T, D}), y_a = be.upload_raw(yv.data(), DType::F32, {T, D});
            Tensor h = be.scratch(DType::F32, {T, D});
            be.add_rmsnorm(res_a, y_a, w, 1e-6f, kind, h);
            mlp_forward(be, b.w, h, y_a);
            // One pass, y written over itself.
            Tensor res_b = be.upload_raw(rv.data(), DType::F32, {T, D}), y_b = be.upload_raw(yv.data(), DType::F32, {T, D});
            const int before = b.offer->calls;
            ASSERT_TRUE(norm_mlp_forward(be, b.w, res_b, w, 1e-6f, kind, y_b));
            EXPECT_EQ(b.offer->calls, before + 1);
            const std::vector<float> ra = host(be, res_a), rb = host(be, res_b), ya = host(be, y_a), yb = host(be, y_b);
            EXPECT_EQ(0, std::memcmp(ra.data(), rb.data(), ra.size() * 4)) << "res, T " << T;
            EXPECT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * 4)) << "y, T " << T;
            EXPECT_NE(ya, yv);  // the block did write y
        }
    }
}

}  // namespace
}  // namespace grimoire
