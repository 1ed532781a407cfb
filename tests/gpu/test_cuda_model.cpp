// Whole Qwen3.5 / Qwen3-Next fixture models (tests/fixtures, made by tools/make_qwen35_fixtures.py) on the
// CUDA backend, against the CPU oracle and the transformers reference, plus CUDA-graph replay vs direct launches.
//
// Tolerances. F32 mode (CudaBackend act F32: every activation and GEMM in fp32) differs from the CPU only in
// summation order, so logits must agree to 1e-3 * max|logit| + 1e-3 and the 64 greedy tokens must be
// identical. BF16 mode (production) rounds every activation, the residual stream and the logits to bf16; on
// these random-weight fixtures that noise is large: the first H200 run measured max |logit diff| vs the fp32
// reference of 0.02..0.50 (qwen3_5: 0.16/0.14/0.50/0.49 for prompts 1/5/70/130; qwen3_5_causal up to 1.25 at
// one position of the 70-token prompt, 28% of max|logit|). Every kernel matches its CPU twin at bf16
// tolerance (test_cuda_kernels) and F32 mode matches tightly, so this is rounding, not a wrong kernel. The
// BF16 check therefore bounds the max at 0.35 * max|logit| and the MEAN |diff| at 0.05 * max|logit| (a
// real bug moves most logits, not a few), and checks greedy decisions teacher-forced where the reference
// top-1/top-2 margin exceeds 0.6 (the measured worst single-position noise ~0.5 at this logit scale, except
// the one outlier). Free-running BF16 greedy agreement is printed, not asserted (margins go down to 0.005).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>

#include "gpu_test_util.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "../test_util.h"

namespace grimoire {
namespace {

std::string fixture(const std::string& name) { return test::fixtures_dir() + "/" + name; }

struct Ref {
    SafetensorsFile file;
    explicit Ref(const std::string& name) : file(fixture(name) + "/reference.safetensors") {}
    std::vector<int32_t> ids(const std::string& n) const {
        const TensorInfo& t = file.tensors().at(n);
        std::vector<int32_t> v(static_cast<size_t>(t.numel()));
        std::memcpy(v.data(), t.data, t.nbytes);
        return v;
    }
    std::vector<float> f32(const std::string& n) const { return file.tensors().at(n).to_f32(); }
    int64_t rows(const std::string& n) const { return file.tensors().at(n).shape[0]; }
};

int32_t argmax(const float* x, int64_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }
float margin(const float* x, int64_t n) {
    std::vector<float> v(x, x + n);
    std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
    return v[0] - v[1];
}

double max_abs(const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m = std::max(m, double(std::abs(x)));
    return m;
}

class CudaModel : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaModel, F32ModeMatchesCpuAndGreedyIsIdentical) {
    GRIMOIRE_REQUIRE_GPU();
    const Ref ref(GetParam());
    auto cpu = make_cpu_backend();
    CudaBackend gpu(0, DType::F32);
    auto mc = load_model(fixture(GetParam()), *cpu);
    auto mg = load_model(fixture(GetParam()), gpu);
    const int64_t V = mc->info().vocab_size;
    for (int n : {1, 5, 70, 130}) {
        const auto prompt = ref.ids("prompt_" + std::to_string(n));
        const int64_t rows = ref.rows("logits_" + std::to_string(n));
        auto sc = mc->new_state(256), sg = mg->new_state(256);
        std::vector<float> lc, lg;
        mc->forward(*sc, prompt, rows, lc);
        mg->forward(*sg, prompt, rows, lg);
        const double tol = 1e-3 * max_abs(lc) + 1e-3;
        test::expect_close(lg, lc, tol, 0, GetParam() + " F32 prompt of " + std::to_string(n));
    }
    const auto want = ref.ids("greedy_tokens");
    auto st = mg->new_state(256);
    std::vector<float> logits;
    mg->forward(*st, ref.ids("greedy_prompt"), 1, logits);
    std::vector<int32_t> got;
    for (size_t i = 0; i < want.size(); ++i) {
        got.push_back(argmax(logits.data(), V));
        const int32_t next = got.back();
        mg->forward(*st, std::span<const int32_t>(&next, 1), 1, logits);
    }
    EXPECT_EQ(got, want);
}

TEST_P(CudaModel, Bf16LogitsAndTeacherForcedGreedy) {
    GRIMOIRE_REQUIRE_GPU();
    const Ref ref(GetParam());
    CudaBackend gpu(0, DType::BF16);
    auto mg = load_model(fixture(GetParam()), gpu);
    const int64_t V = mg->info().vocab_size;
    for (int n : {1, 5, 70, 130}) {
        const std::string s = std::to_string(n);
        const auto want = ref.f32("logits_" + s);
        auto st = mg->new_state(256);
        std::vector<float> got;
        mg->forward(*st, ref.ids("prompt_" + s), ref.rows("logits_" + s), got);
        const double m = max_abs(want);
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
        double mean = 0;
        for (size_t i = 0; i < got.size(); ++i) mean += std::abs(got[i] - want[i]);
        mean /= static_cast<double>(got.size());
        std::printf("[ bf16 ] %s prompt %d: max |logit diff| %.4f, mean %.4f (max |logit| %.3f)\n",
                    GetParam().c_str(), n, worst, mean, m);
        test::expect_close(got, want, 0.35 * m, 0, GetParam() + " BF16 prompt of " + s);
        EXPECT_LE(mean, 0.05 * m) << GetParam() << " BF16 prompt of " << s;
    }
    // Teacher-forced: feed the reference tokens; the CPU oracle supplies each step's margin.
    auto cpu = make_cpu_backend();
    auto mc = load_model(fixture(GetParam()), *cpu);
    const auto want = ref.ids("greedy_tokens");
    auto sg = mg->new_state(256), sc = mc->new_state(256);
    std::vector<float> lg, lc;
    const auto prompt = ref.ids("greedy_prompt");
    mg->forward(*sg, prompt, 1, lg);
    mc->forward(*sc, prompt, 1, lc);
    int checked = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (margin(lc.data(), V) > 0.6f) {
            EXPECT_EQ(argmax(lg.data(), V), want[i]) << "step " << i << ", reference margin " << margin(lc.data(), V);
            ++checked;
        }
        const int32_t next = want[i];
        mg->forward(*sg, std::span<const int32_t>(&next, 1), 1, lg);
        mc->forward(*sc, std::span<const int32_t>(&next, 1), 1, lc);
    }
    // Free-running BF16 greedy, for the record.
    auto fr = mg->new_state(256);
    mg->forward(*fr, prompt, 1, lg);
    size_t same = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const int32_t next = argmax(lg.data(), V);
        if (next != want[i]) break;
        ++same;
        mg->forward(*fr, std::span<const int32_t>(&next, 1), 1, lg);
    }
    std::printf("[ bf16 ] %s: teacher-forced steps checked %d of %zu; free-running greedy identical for %zu of %zu\n",
                GetParam().c_str(), checked, want.size(), same, want.size());
    EXPECT_GE(checked, 8);
}

TEST_P(CudaModel, GraphReplayEqualsDirectLaunches) {
    GRIMOIRE_REQUIRE_GPU();
    const Ref ref(GetParam());
    std::vector<std::vector<float>> runs;
    int64_t replays = 0, captures = 0;
    for (bool graphs : {false, true}) {
        CudaBackend gpu(0, DType::BF16);
        gpu.set_graphs(graphs);
        auto m = load_model(fixture(GetParam()), gpu);
        const int64_t V = m->info().vocab_size;
        auto st = m->new_state(256);
        std::vector<float> logits, all;
        m->forward(*st, ref.ids("greedy_prompt"), 1, logits);
        for (int i = 0; i < 64; ++i) {
            const int32_t next = argmax(logits.data(), V);
            m->forward(*st, std::span<const int32_t>(&next, 1), 1, logits);
            all.insert(all.end(), logits.begin(), logits.end());
        }
        runs.push_back(all);
        if (graphs) {
            replays = gpu.graph_stats().replays;
            captures = gpu.graph_stats().captures;
        }
    }
    EXPECT_GE(captures, 1);
    EXPECT_GE(replays, 60) << "the decode step should be captured once and replayed";
    ASSERT_EQ(runs[0].size(), runs[1].size());
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)))
        << "graph replay must be bitwise identical to direct launches";
}

// Model::forward_greedy: the argmax on the device (CudaBackend::argmax) equals the host argmax of forward()'s
// logits (the same BF16 values widened), for one row through 64 greedy steps (graphs replayed) and for the
// last 4 rows of a 4-token step; the two states then hold the same sequence.
TEST_P(CudaModel, DeviceGreedyEqualsArgmaxOfLogits) {
    GRIMOIRE_REQUIRE_GPU();
    const Ref ref(GetParam());
    CudaBackend gpu(0, DType::BF16);
    auto m = load_model(fixture(GetParam()), gpu);
    const int64_t V = m->info().vocab_size;
    auto sa = m->new_state(256), sb = m->new_state(256);
    std::vector<float> logits;
    std::vector<int32_t> ids;
    m->forward(*sa, ref.ids("greedy_prompt"), 1, logits);
    m->forward_greedy(*sb, ref.ids("greedy_prompt"), 1, ids);
    ASSERT_EQ(ids.size(), 1u);
    for (int i = 0; i < 64; ++i) {
        const int32_t want = argmax(logits.data(), V);
        ASSERT_EQ(ids[0], want) << "step " << i;
        m->forward(*sa, std::span<const int32_t>(&want, 1), 1, logits);
        m->forward_greedy(*sb, std::span<const int32_t>(&ids[0], 1), 1, ids);
    }
    const std::vector<int32_t> four = {ids[0], 17, 4, 99};
    m->forward(*sa, four, 4, logits);
    m->forward_greedy(*sb, four, 4, ids);
    ASSERT_EQ(ids.size(), 4u);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(ids[static_cast<size_t>(r)], argmax(logits.data() + r * V, V)) << "row " << r;
    EXPECT_GE(gpu.graph_stats().replays, 60);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaModel, ::testing::Values("qwen3_5", "qwen3_5_causal", "qwen3_next"));

TEST(CudaBackendFactory, AutoPicksCudaWhenPresent) {
    GRIMOIRE_REQUIRE_GPU();
    auto be = make_backend("auto");
    EXPECT_EQ(be->device(), Device::CUDA) << be->name();
    EXPECT_EQ(make_backend("cuda")->device(), Device::CUDA);
    EXPECT_EQ(make_backend("cpu")->device(), Device::CPU);
}

}  // namespace
}  // namespace grimoire
