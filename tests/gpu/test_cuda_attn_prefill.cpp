// The tensor-core prefill attention (src/kernels/cuda/attention_prefill_tc.cu) against the CPU oracle:
// causal GQA at head_dim 128 and 256, query-head groups of 1, 3 and 6, prompts of 1 (decode path, for
// contrast), 3, 17, 63, 65, 1000+ and 4096 tokens, from an empty cache and continuing a cached prefix.
//
// Tolerance: q, k, v are bf16-exact, so both sides compute the same fp32 scores up to summation order (~1e-6
// relative). The GPU rounds the softmax weights P to BF16 (8 significant bits: each weight moves by at most
// 2^-8 of itself) before P V while normalising by the fp32 sum, so the output moves by at most
// 2^-8 * sum_j p_j |v_j| / sum_j p_j <= 2^-8 * max|v| in absolute terms (all roundings in one direction);
// atol is 1.25x that bound (v in [-1, 1]: 4.9e-3). The BF16 output adds one rounding, 2^-8 relative: rtol
// 8e-3 (2x the bf16 step, as in test_cuda_kernels); F32 outputs have no such rounding (rtol 0).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "gpu_test_util.h"

namespace grimoire {
namespace {

using test::expect_close;
using test::get;
using test::kRtolBf16;
using test::put;
using test::rand_bf16;

constexpr double kVMax = 1.0;  // v is uniform in [-1, 1)
const double kAtolP = 1.25 * std::ldexp(kVMax, -8);

struct Case {
    int64_t Hq, Hkv, D, n_past, T;
    DType q_dt = DType::BF16;  // q and out; the caches are always BF16 (the tensor-core path)
};

std::string name(const Case& c) {
    return "Hq=" + std::to_string(c.Hq) + " Hkv=" + std::to_string(c.Hkv) + " D=" + std::to_string(c.D) +
           " n_past=" + std::to_string(c.n_past) + " T=" + std::to_string(c.T) +
           (c.q_dt == DType::F32 ? " q/out F32" : "");
}

// Prefill of T tokens at n_past; cache rows [0, n_past) hold a random prefix. On the GPU the rows past n_past + T
// hold NaN: any read of a row no query may see (a tile's tail, say) would poison the output.
void run_case(const Case& c) {
    auto cpu = make_cpu_backend();
    CudaBackend gpu(0, DType::BF16);
    const int64_t max_ctx = c.n_past + c.T + 70, row = c.Hkv * c.D;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    auto kc0 = rand_bf16(static_cast<size_t>(max_ctx * row), 21, -2, 2);
    auto vc0 = rand_bf16(static_cast<size_t>(max_ctx * row), 22, static_cast<float>(-kVMax), static_cast<float>(kVMax));
    Tensor kcc = put(*cpu, kc0, DType::F32, {max_ctx, c.Hkv, c.D}), vcc = put(*cpu, vc0, DType::F32, {max_ctx, c.Hkv, c.D});
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t i = static_cast<size_t>((c.n_past + c.T) * row); i < kc0.size(); ++i) kc0[i] = vc0[i] = nan;
    Tensor kcg = put(gpu, kc0, DType::BF16, {max_ctx, c.Hkv, c.D}), vcg = put(gpu, vc0, DType::BF16, {max_ctx, c.Hkv, c.D});

    const uint32_t seed = 31 + static_cast<uint32_t>(c.T * 7 + c.n_past);
    const auto q = rand_bf16(static_cast<size_t>(c.T * c.Hq * c.D), seed, -2, 2);
    const auto k = rand_bf16(static_cast<size_t>(c.T * row), seed + 1, -2, 2);
    const auto v = rand_bf16(static_cast<size_t>(c.T * row), seed + 2, static_cast<float>(-kVMax), static_cast<float>(kVMax));
    Tensor qc = put(*cpu, q, DType::F32, {c.T, c.Hq, c.D}), qg = put(gpu, q, c.q_dt, {c.T, c.Hq, c.D});
    Tensor kc = put(*cpu, k, DType::F32, {c.T, c.Hkv, c.D}), kg = put(gpu, k, DType::BF16, {c.T, c.Hkv, c.D});
    Tensor vc = put(*cpu, v, DType::F32, {c.T, c.Hkv, c.D}), vg = put(gpu, v, DType::BF16, {c.T, c.Hkv, c.D});
    Tensor oc = cpu->scratch(DType::F32, {c.T, c.Hq, c.D}), og = gpu.scratch(c.q_dt, {c.T, c.Hq, c.D});
    cpu->attention(qc, kc, vc, kcc, vcc, c.n_past, scale, oc);
    gpu.attention(qg, kg, vg, kcg, vcg, c.n_past, scale, og);
    const double rtol = c.q_dt == DType::F32 ? 0.0 : kRtolBf16;
    expect_close(get(gpu, og), get(*cpu, oc), kAtolP, rtol, "attention prefill " + name(c));
}

TEST(CudaAttnPrefill, HeadDim256GroupsOf6And3) {
    GRIMOIRE_REQUIRE_GPU();
    for (int64_t T : {1, 3, 17, 63, 65, 1031}) {
        run_case({12, 2, 256, 0, T});    // Qwen3.5: 6 query heads per KV head
        run_case({6, 2, 256, 77, T});    // 3 per KV head, continuing a 77-row prefix
    }
}

TEST(CudaAttnPrefill, HeadDim128GroupsOf1And6) {
    GRIMOIRE_REQUIRE_GPU();
    for (int64_t T : {1, 3, 17, 63, 65, 1031}) {
        run_case({4, 4, 128, 0, T});     // MHA
        run_case({12, 2, 128, 130, T});  // 6 per KV head after a 130-row prefix (not a tile multiple)
    }
}

TEST(CudaAttnPrefill, SmallHeadDimsAndF32Activations) {
    GRIMOIRE_REQUIRE_GPU();
    run_case({4, 2, 32, 3, 70});                  // the fixture's head_dim
    run_case({6, 2, 64, 65, 129});
    run_case({6, 2, 256, 40, 100, DType::F32});   // f32 q and out: P's rounding is the only BF16 step left
    run_case({8, 8, 128, 0, 200, DType::F32});
}

TEST(CudaAttnPrefill, LongPromptAndLongPrefix) {
    GRIMOIRE_REQUIRE_GPU();
    run_case({6, 1, 256, 0, 4096});   // one 27B KV-head group at the benchmark's length
    run_case({3, 1, 128, 3000, 300});  // chunked prefill: a short chunk after a long cached prefix
}

}  // namespace
}  // namespace grimoire
