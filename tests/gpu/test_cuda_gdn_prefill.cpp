// The chunked Gated DeltaNet prefill on tensor cores (kernels/cuda/gdn_chunk_tc.cu) against the CPU twin
// (CpuBackend::gated_delta_rule, fp32) on prompts that end exactly on a chunk (64, 4096), one token past one
// (65), one short of two (127), mid-chunk (200) and long (1031), with Hv / Hk = 3, a non-zero initial state,
// fast and slow decay; the output AND the final state are compared.
//
// Tolerances. Inputs are bf16-exact, so q, k, v enter the tensor cores unrounded; every fp32 operand of an mma
// (the state, R, V'', T' = (I + A)^-1 diag(beta), P T') is split into a BF16 high part and a BF16 residual, so
// each product carries at most ~2^-17 relative operand error (the dropped lo * lo term) on top of fp32
// summation-order differences. The recurrence is contractive (decay <= 1, I - beta k k^T has norm <= 1), so
// that does not grow over chunks: the state must agree to atol 1e-4 + rtol 1e-3, the same bound the fp32
// kernels meet in test_cuda_kernels, ~100x the expected error (a single BF16 rounding of the state, 2^-9 ~ 2e-3,
// would not be covered by it).
// The output is stored as BF16 (one 2^-9 rounding): rtol 8e-3 (twice the BF16 step) + atol 2e-3, as for the
// other BF16 kernels.
#include <gtest/gtest.h>

#include <string>

#include "gpu_test_util.h"

namespace grimoire {
namespace {

struct Decay {
    float a_lo, a_hi;  // range of the gate input a: softplus(a + dt_bias) sets how fast the state forgets
    const char* name;
};

// One prompt of T tokens from the same non-zero initial state on both backends.
void prefill_case(int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, const Decay& decay, uint32_t seed) {
    std::unique_ptr<Backend> cpu = make_cpu_backend();
    CudaBackend gpu(0, DType::BF16);
    auto mk = [&](int64_t n, float lo, float hi) { return test::rand_bf16(static_cast<size_t>(n), seed++, lo, hi); };
    const auto A = mk(Hv, -1, 1), dtb = mk(Hv, -1, 1), s0 = mk(Hv * dk * dv, -0.5f, 0.5f);
    const auto q = mk(T * Hk * dk, -1, 1), k = mk(T * Hk * dk, -1, 1), v = mk(T * Hv * dv, -1, 1);
    const auto a = mk(T * Hv, decay.a_lo, decay.a_hi), b = mk(T * Hv, -3, 3);
    Tensor Ac = test::put(*cpu, A, DType::F32, {Hv}), Ag = test::put(gpu, A, DType::F32, {Hv});
    Tensor dc = test::put(*cpu, dtb, DType::F32, {Hv}), dg = test::put(gpu, dtb, DType::F32, {Hv});
    Tensor sc = test::put(*cpu, s0, DType::F32, {Hv, dk, dv}), sg = test::put(gpu, s0, DType::F32, {Hv, dk, dv});
    Tensor qc = test::put(*cpu, q, DType::F32, {T, Hk, dk}), qg = test::put(gpu, q, DType::BF16, {T, Hk, dk});
    Tensor kc = test::put(*cpu, k, DType::F32, {T, Hk, dk}), kg = test::put(gpu, k, DType::BF16, {T, Hk, dk});
    Tensor vc = test::put(*cpu, v, DType::F32, {T, Hv, dv}), vg = test::put(gpu, v, DType::BF16, {T, Hv, dv});
    Tensor ac = test::put(*cpu, a, DType::F32, {T, Hv}), ag = test::put(gpu, a, DType::BF16, {T, Hv});
    Tensor bc = test::put(*cpu, b, DType::F32, {T, Hv}), bg = test::put(gpu, b, DType::BF16, {T, Hv});
    Tensor oc = cpu->scratch(DType::F32, {T, Hv, dv}), og = gpu.scratch(DType::BF16, {T, Hv, dv});
    cpu->gated_delta_rule(qc, kc, vc, ac, bc, Ac, dc, sc, oc);
    gpu.gated_delta_rule(qg, kg, vg, ag, bg, Ag, dg, sg, og);
    const std::string what = std::string("gdn prefill ") + decay.name + " T=" + std::to_string(T) + " Hk=" +
                             std::to_string(Hk) + " Hv=" + std::to_string(Hv) + " dk=" + std::to_string(dk) +
                             " dv=" + std::to_string(dv);
    test::expect_close(test::get(gpu, og), test::get(*cpu, oc), 2e-3, 8e-3, what + " output");
    test::expect_close(test::get(gpu, sg), test::get(*cpu, sc), 1e-4, 1e-3, what + " state");
}

const Decay kFast{-3.0f, 3.0f, "fast decay"};    // g down to ~ -10 per token: chunks barely see each other
const Decay kSlow{-9.0f, -5.0f, "slow decay"};   // g ~ -1e-3 per token: the state carries across all chunks

TEST(CudaGdnPrefill, MatchesCpuAt27BHeadSizes) {
    GRIMOIRE_REQUIRE_GPU();
    uint32_t seed = 100;
    for (int64_t T : {64, 65, 127, 200, 1031}) prefill_case(T, 2, 6, 128, 128, kFast, seed += 50);
    for (int64_t T : {65, 200, 1031}) prefill_case(T, 2, 6, 128, 128, kSlow, seed += 50);
}

TEST(CudaGdnPrefill, MatchesCpuOn4096Tokens) {
    GRIMOIRE_REQUIRE_GPU();
    prefill_case(4096, 1, 3, 128, 128, kSlow, 7);
    prefill_case(4096, 1, 3, 128, 128, kFast, 8);
}

// Head sizes below the 128 the tiles hold (zero-padded k columns, a partial 32-column state slice).
TEST(CudaGdnPrefill, MatchesCpuOnSmallHeads) {
    GRIMOIRE_REQUIRE_GPU();
    prefill_case(200, 2, 6, 48, 40, kSlow, 11);
    prefill_case(130, 1, 3, 16, 24, kFast, 12);
}

}  // namespace
}  // namespace grimoire
