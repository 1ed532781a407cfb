// Every CUDA kernel against its CPU twin (the CpuBackend oracle) on odd shapes: token counts 1, 3, 17, 63,
// 65 and 1000+, widths that are not multiples of the tiles. Inputs are bf16-exact so both backends see the
// same numbers; tolerances: BF16 outputs carry one rounding (at most 2^-8 relative: half the 2^-7 step) on top of
// fp32 summation-order differences, hence rtol 8e-3 (2x that bound, per house rule 1) and an atol scaled to the
// output size;
// F32 paths must agree to fp32 summation order (rtol 1e-4).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "gpu_test_util.h"

namespace grimoire {
namespace {

using test::expect_close;
using test::get;
using test::kRtolBf16;
using test::put;
using test::rand_bf16;

const int64_t kTokens[] = {1, 3, 17, 63, 65, 1031};

struct Backends {
    std::unique_ptr<Backend> cpu = make_cpu_backend();
    std::unique_ptr<CudaBackend> gpu;
    explicit Backends(DType act = DType::BF16) { gpu = std::make_unique<CudaBackend>(0, act); }
};

TEST(CudaKernels, Embedding) {
    GRIMOIRE_REQUIRE_GPU();
    Backends b;
    const int64_t V = 1000, H = 257;
    const auto table = rand_bf16(V * H, 1);
    Tensor tc = put(*b.cpu, table, DType::F32, {V, H}), tg = put(*b.gpu, table, DType::BF16, {V, H});
    for (int64_t T : kTokens) {
        std::vector<int32_t> ids(static_cast<size_t>(T));
        for (int64_t i = 0; i < T; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % V);
        Tensor ic = b.cpu->upload_raw(ids.data(), DType::I32, {T}), ig = b.gpu->upload_raw(ids.data(), DType::I32, {T});
        Tensor oc = b.cpu->scratch(DType::F32, {T, H}), og = b.gpu->scratch(DType::BF16, {T, H});
        b.cpu->embedding(tc, ic, oc);
        b.gpu->embedding(tg, ig, og);
        expect_close(get(*b.gpu, og), get(*b.cpu, oc), 0, 0, "embedding T=" + std::to_string(T));  // a pure copy
    }
}

TEST(CudaKernels, RmsNormBothKindsInPlaceAndNot) {
    GRIMOIRE_REQUIRE_GPU();
    Backends b;
    for (int64_t D : {64, 257, 5120}) {
        const auto w = rand_bf16(static_cast<size_t>(D), 2, -0.5f, 0.5f);
        Tensor wc = put(*b.cpu, w, DType::F32, {D}), wg = put(*b.gpu, w, DType::F32, {D});
        for (int64_t R : {1, 3, 17, 65}) {
            const auto x = rand_bf16(static_cast<size_t>(R * D), 3 + static_cast<uint32_t>(R), -3.0f, 3.0f);
            for (NormKind k : {NormKind::PLAIN, NormKind::PLUS_ONE}) {
                Tensor xc = put(*b.cpu, x, DType::F32, {R, D}), xg = put(*b.gpu, x, DType::BF16, {R, D});
                Tensor og = b.gpu->scratch(DType::BF16, {R, D});
                b.cpu->rmsnorm(xc, wc, 1e-6f, k, xc);
                b.gpu->rmsnorm(xg, wg, 1e-6f, k, og);
                b.gpu->rmsnorm(xg, wg, 1e-6f, k, xg);  // in place
                const auto want = get(*b.cpu, xc);
                const std::string what = "rmsnorm D=" + std::to_string(D) + " R=" + std::to_string(R);
                expect_close(get(*b.gpu, og), want, 1e-3, kRtolBf16, what);
                expect_close(get(*b.gpu, xg), want, 1e-3, kRtolBf16, what + " in place");
            }
        }
    }
}

TEST(CudaKernels, RmsNormGated) {
    GRIMOIRE_REQUIRE_GPU();
    Backends b;
    // D = 24 takes the block-per-row kernel; 128 (the DeltaNet's dv), 256 and 384 the warp-per-row BF16 path.
    for (int64_t D : {24, 128, 256, 384}) {
        const auto w = rand_bf16(static_cast<size_t>(D), 4, 0.5f, 1.5f);
        Tensor wc = put(*b.cpu, w, DType::F32, {D}), wg = put(*b.gpu, w, DType::F32, {D});
        for (int64_t R : {1, 3 * 6, 17, 65 * 48}) {  // 17: a warp with one row of its two
            const auto x = rand_bf16(static_cast<size_t>(R * D), 5, -2, 2), z = rand_bf16(static_cast<size_t>(R * D), 6, -4, 4);
            Tensor xc = put(*b.cpu, x, DType::F32, {R, D}), zc = put(*b.cpu, z, DType::F32, {R, D});
            Tensor xg = put(*b.gpu, x, DType::BF16, {R, D}), zg = put(*b.gpu, z, DType::BF16, {R, D});
            Tensor oc = b.cpu->scratch(DType::F32, {R, D}), og = b.gpu->scratch(DType::BF16, {R, D});
            b.cpu->rmsnorm_gated(xc, zc, wc, 1e-6f, oc);
            b.gpu->rmsnorm_gated(xg, zg, wg, 1e-6f, og);
            expect_close(get(*b.gpu, og), get(*b.cpu, oc), 2e-3, kRtolBf16, "rmsnorm_gated D=" + std::to_string(D));
            b.gpu->rmsnorm_gated(xg, zg, wg, 1e-6f, xg);  // in place (out aliases x)
            expect_close(get(*b.gpu, xg), get(*b.cpu, oc), 2e-3, kRtolBf16, "rmsnorm_gated in place D=" + std::to_string(D));
        }
    }
}

// zero() calls in a row join one launch while graphs defer the launches; a flush in between (here the
// to_host of a check) must start a new one, and sizes that are not multiples of 16 bytes keep their tails.
TEST(CudaKernels, ZeroFillsJoinedAndSeparated) {
    GRIMOIRE_REQUIRE_GPU();
    for (bool graphs : {true, false}) {
        Backends b;
        b.gpu->set_graphs(graphs);
        std::vector<Tensor> ts;
        for (int64_t n : {1, 7, 16, 1000, 3 * 10240, 5}) {
            const auto v = rand_bf16(static_cast<size_t>(n), 9, 1.0f, 2.0f);
            ts.push_back(put(*b.gpu, v, DType::BF16, {n}));
        }
        const auto guard = rand_bf16(8, 10, 1.0f, 2.0f);
        Tensor g = put(*b.gpu, guard, DType::BF16, {8});
        // The first three in one batch, read back (sync points), then the rest in a second batch.
        auto expect_zero = [&](size_t i, const char* what) {
            expect_close(get(*b.gpu, ts[i]), std::vector<float>(static_cast<size_t>(ts[i].numel()), 0.0f), 0, 0, what);
        };
        for (size_t i = 0; i < 3; ++i) b.gpu->zero(ts[i]);
        for (size_t i = 0; i < 3; ++i) expect_zero(i, "zero batch 1");
        for (size_t i = 3; i < 6; ++i) b.gpu->zero(ts[i]);
        b.gpu->synchronize();
        for (size_t i = 3; i < 6; ++i) expect_zero(i, "zero batch 2");
        expect_close(get(*b.gpu, g), guard, 0, 0, "untouched neighbour");
    }
}

TEST(CudaKernels, ElementwiseOps) {
    GRIMOIRE_REQUIRE_GPU();
    Backends b;
    for (int64_t T : kTokens) {
        const int64_t N = 333;
        const auto x = rand_bf16(static_cast<size_t>(T * N), 7, -4, 4), y = rand_bf16(static_cast<size_t>(T * N), 8, -4, 4);
        const auto bias = rand_bf16(static_cast<size_t>(N), 9);
        auto C = [&](const std::vector<float>& v) { return put(*b.cpu, v, DType::F32, {T, N}); };
        auto G = [&](const std::vector<float>& v) { return put(*b.gpu, v, DType::BF16, {T, N}); };
        const std::string t = " T=" + std::to_string(T);
        {
            Tensor ac = C(x), bc = C(y), oc = b.cpu->scratch(DType::F32, {T, N});
            Tensor ag = G(x), bg = G(y), og = b.gpu->scratch(DType::BF16, {T, N});
            b.cpu->add(ac, bc, oc);
            b.gpu->add(ag, bg, og);
            expect_close(get(*b.gpu, og), get(*b.cpu, oc), 1e-6, 4e-3, "add" + t);
            b.cpu->silu_mul(ac, bc, oc);
            b.gpu->silu_mul(ag, bg, og);
            expect_close(get(*b.gpu, og), get(*b.cpu, oc), 1e-3, kRtolBf16, "silu_mul" + t);
        }
        {  // a width that is a multiple of 8: the 16-byte BF16 path
            const int64_t N8 = 344;
            const auto x8 = rand_bf16(static_cast<size_t>(T * N8), 17, -4, 4), y8 = rand_bf16(static_cast<size_t>(T * N8), 18, -4, 4);
            Tensor ac = put(*b.cpu, x8, DType::F32, {T, N8}), bc = put(*b.cpu, y8, DType::F32, {T, N8});
            Tensor ag = put(*b.gpu, x8, DType::BF16, {T, N8}), bg = put(*b.gpu, y8, DType::BF16, {T, N8});
            Tensor oc = b.cpu->scratch(DType::F32, {T, N8}), og = b.gpu->scratch(DType::BF16, {T, N8});
            b.cpu->silu_mul(ac, bc, oc);
            b.gpu->silu_mul(ag, bg, og);
            expect_close(get(*b.gpu, og), get(*b.cpu, oc), 1e-3, kRtolBf16, "silu_mul x8" + t);
        }
        {
            Tensor ac = C(x), gc = C(y), ag = G(x), gg = G(y);
            b.cpu->mul_sigmoid(ac, gc);
            b.gpu->mul_sigmoid(ag, gg);
            expect_close(get(*b.gpu, ag), get(*b.cpu, ac), 1e-3, kRtolBf16, "mul_sigmoid" + t);
            b.cpu->scale(ac, 0.37f);
            b.gpu->scale(ag, 0.37f);
            expect_close(get(*b.gpu, ag), get(*b.cpu, ac), 1e-3, kRtolBf16, "scale" + t);
        }
        {
            // Fresh bf16-exact inputs: after the ops above the GPU copy carries bf16 roundings the CPU's
            // fp32 copy does not, and x + bias cancels them into large relative errors.
            Tensor ac = C(x), ag = G(x);
            Tensor bc = put(*b.cpu, bias, DType::F32, {N}), bg = put(*b.gpu, bias, DType::F32, {N});
            b.cpu->add_bias(ac, bc);
            b.gpu->add_bias(ag, bg);
            expect_close(get(*b.gpu, ag), get(*b.cpu, ac), 1e-6, 4e-3, "add_bias" + t);
        }
        {
            Tensor sc = C(x), sg = G(x);
            Tensor oc = b.cpu->scratch(DType::F32, {T, 101}), og = b.gpu->scratch(DType::BF16, {T, 101});
            b.cpu->copy_cols(sc, 211, oc);
            b.gpu->copy_cols(sg, 211, og);
            expect_close(get(*b.gpu, og), get(*b.cpu, oc), 0, 0, "copy_cols" + t);
        }
    }
}

TEST(CudaKernels, RopeNeoxPartialAndGptjFull) {
    GRIMOIRE_REQUIRE_GPU();
    Backends b;
    struct Case {
        int64_t H, D;
        int rot;
        bool neox;
        float theta;
    };
    for (const Case& c : {Case{3, 256, 64, true, 1e7f}, Case{5, 64, 64, false, 1e4f}, Case{2, 32, 8, true, 1e4f}}) {
        RopeParams p;
        p.rot_dim = c.rot;
        p.neox = c.neox;
        for (int i = 0; i < c.rot / 2; ++i) p.inv_freq.push_back(std::pow(c.theta, -2.0f * i / c.rot));
        for (int64_t T : kTokens) {
            const auto x = rand_bf16(static_cast<size_t>(T * c.H * c.D), 10);
            std::vector<int32_t> pos(static_cast<size_t>(T));
            for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(t * 37 % 40000 + (T > 100 ? 30000 : 0));
            Tensor pc = b.cpu->upload_raw(pos.data(), DType::I32, {T}), pg = b.gpu->upload_raw(pos.data(), DType::I32, {T});
            Tensor xc = put(*b.cpu, x, DType::F32, {T, c.H, c.D}), xg = put(*b.gpu, x, DType::BF16, {T, c.H, c.D});
            b.cpu->rope(xc, pc, p);
            b.gpu->rope(xg, pg, p);
            expect_close(get(*b.gpu, xg), get(*b.cpu, xc), 2e-3, kRtolBf16,
                         "rope D=" + std::to_string(c.D) + " T=" + std::to_string(T));
        }
    }
}

// Prefill of T tokens at n_past (cache rows before n_past pre-filled), then 3 decode steps, CUDA vs CPU.
void attention_case(DType act, int64_t Hq, int64_t Hkv, int64_t D, int64_t n_past, int64_t T, double rtol) {
    Backends b(act);
    const int64_t max_ctx = n_past + T + 4;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const auto kc0 = rand_bf16(static_cast<size_t>(max_ctx * Hkv * D), 11, -2, 2);
    const auto vc0 = rand_bf16(static_cast<size_t>(max_ctx * Hkv * D), 12);
    Tensor kcc = put(*b.cpu, kc0, DType::F32, {max_ctx, Hkv, D}), vcc = put(*b.cpu, vc0, DType::F32, {max_ctx, Hkv, D});
    Tensor kcg = put(*b.gpu, kc0, act, {max_ctx, Hkv, D}), vcg = put(*b.gpu, vc0, act, {max_ctx, Hkv, D});
    int64_t past = n_past;
    for (int64_t step : {T, int64_t{1}, int64_t{1}, int64_t{1}}) {
        const auto q = rand_bf16(static_cast<size_t>(step * Hq * D), 13 + static_cast<uint32_t>(past), -2, 2);
        const auto k = rand_bf16(static_cast<size_t>(step * Hkv * D), 14 + static_cast<uint32_t>(past), -2, 2);
        const auto v = rand_bf16(static_cast<size_t>(step * Hkv * D), 15 + static_cast<uint32_t>(past));
        Tensor qc = put(*b.cpu, q, DType::F32, {step, Hq, D}), qg = put(*b.gpu, q, act, {step, Hq, D});
        Tensor kc = put(*b.cpu, k, DType::F32, {step, Hkv, D}), kg = put(*b.gpu, k, act, {step, Hkv, D});
        Tensor vc = put(*b.cpu, v, DType::F32, {step, Hkv, D}), vg = put(*b.gpu, v, act, {step, Hkv, D});
        Tensor oc = b.cpu->scratch(DType::F32, {step, Hq, D}), og = b.gpu->scratch(act, {step, Hq, D});
        b.cpu->attention(qc, kc, vc, kcc, vcc, past, scale, oc);
        b.gpu->attention(qg, kg, vg, kcg, vcg, past, scale, og);
        expect_close(get(*b.gpu, og), get(*b.cpu, oc), 2e-3, rtol,
                     "attention Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) + " D=" +
                         std::to_string(D) + " n_past=" + std::to_string(past) + " T=" + std::to_string(step));
        past += step;
    }
}

TEST(CudaKernels, AttentionPrefillAndDecodeGqa) {
    GRIMOIRE_REQUIRE_GPU();
    for (int64_t T : kTokens) {
        attention_case(DType::BF16, 12, 2, 256, 0, T, kRtolBf16);  // Qwen3.5 head_dim 256, 6 q heads per kv head
        attention_case(DType::BF16, 8, 8, 128, 5, T, kRtolBf16);    // MHA head_dim 128
    }
    attention_case(DType::BF16, 4, 2, 32, 3, 70, kRtolBf16);        // the fixture's head_dim 32
    attention_case(DType::F32, 6, 2, 64, 17, 65, 1e-4);             // fp32 caches: summation order only
}

TEST(CudaKernels, AttentionDecodeLongContextSplits) {
    GRIMOIRE_REQUIRE_GPU();
    // Lengths around the split boundaries (>= 128 rows per split, at most 128 splits): 2, 3, 32 and 128 splits.
    for (int64_t n_past : {200, 300, 4095, 20000}) attention_case(DType::BF16, 24, 4, 256, n_past, 1, kRtolBf16);
}

void conv_case(int64_t C, std::initializer_list<int64_t> steps) {
    Backends b;
    const int64_t K = 4;
    const auto w = rand_bf16(static_cast<size_t>(C * K), 16);
    Tensor wc = put(*b.cpu, w, DType::F32, {C, 1, K}), wg = put(*b.gpu, w, DType::F32, {C, 1, K});
    Tensor sc = b.cpu->alloc_persistent(DType::F32, {K - 1, C}), sg = b.gpu->alloc_persistent(DType::BF16, {K - 1, C});
    uint32_t seed = 17;
    for (int64_t T : steps) {
        const auto x = rand_bf16(static_cast<size_t>(T * C), seed++, -2, 2);
        Tensor xc = put(*b.cpu, x, DType::F32, {T, C}), xg = put(*b.gpu, x, DType::BF16, {T, C});
        Tensor oc = b.cpu->scratch(DType::F32, {T, C}), og = b.gpu->scratch(DType::BF16, {T, C});
        b.cpu->conv1d_silu(xc, wc, sc, oc);
        b.gpu->conv1d_silu(xg, wg, sg, og);
        const std::string what = "conv1d C=" + std::to_string(C) + " T=" + std::to_string(T);
        expect_close(get(*b.gpu, og), get(*b.cpu, oc), 2e-3, kRtolBf16, what);
        expect_close(get(*b.gpu, sg), get(*b.cpu, sc), 0, 0, what + " state");  // raw input rows: exact
    }
}

TEST(CudaKernels, Conv1dSiluCarriesState) {
    GRIMOIRE_REQUIRE_GPU();
    conv_case(333, {17, 1, 3, 1, 2, 65});
    conv_case(10240, {1031, 1, 63});
}

void gdn_case(DType act, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, std::initializer_list<int64_t> steps,
              double rtol) {
    Backends b(act);
    const auto A = rand_bf16(static_cast<size_t>(Hv), 20, -1, 1), dtb = rand_bf16(static_cast<size_t>(Hv), 21, -1, 1);
    Tensor Ac = put(*b.cpu, A, DType::F32, {Hv}), Ag = put(*b.gpu, A, DType::F32, {Hv});
    Tensor dc = put(*b.cpu, dtb, DType::F32, {Hv}), dg = put(*b.gpu, dtb, DType::F32, {Hv});
    Tensor sc = b.cpu->alloc_persistent(DType::F32, {Hv, dk, dv}), sg = b.gpu->alloc_persistent(DType::F32, {Hv, dk, dv});
    uint32_t seed = 30;
    for (int64_t T : steps) {
        auto mk = [&](int64_t n, float lo, float hi) { return rand_bf16(static_cast<size_t>(n), seed++, lo, hi); };
        const auto q = mk(T * Hk * dk, -1, 1), k = mk(T * Hk * dk, -1, 1), v = mk(T * Hv * dv, -1, 1);
        const auto a = mk(T * Hv, -3, 3), bb = mk(T * Hv, -3, 3);
        Tensor qc = put(*b.cpu, q, DType::F32, {T, Hk, dk}), qg = put(*b.gpu, q, act, {T, Hk, dk});
        Tensor kc = put(*b.cpu, k, DType::F32, {T, Hk, dk}), kg = put(*b.gpu, k, act, {T, Hk, dk});
        Tensor vc = put(*b.cpu, v, DType::F32, {T, Hv, dv}), vg = put(*b.gpu, v, act, {T, Hv, dv});
        Tensor ac = put(*b.cpu, a, DType::F32, {T, Hv}), ag = put(*b.gpu, a, act, {T, Hv});
        Tensor bc = put(*b.cpu, bb, DType::F32, {T, Hv}), bg = put(*b.gpu, bb, act, {T, Hv});
        Tensor oc = b.cpu->scratch(DType::F32, {T, Hv, dv}), og = b.gpu->scratch(act, {T, Hv, dv});
        b.cpu->gated_delta_rule(qc, kc, vc, ac, bc, Ac, dc, sc, oc);
        b.gpu->gated_delta_rule(qg, kg, vg, ag, bg, Ag, dg, sg, og);
        const std::string what = "gated_delta_rule Hk=" + std::to_string(Hk) + " Hv=" + std::to_string(Hv) + " dk=" +
                                 std::to_string(dk) + " dv=" + std::to_string(dv) + " T=" + std::to_string(T);
        expect_close(get(*b.gpu, og), get(*b.cpu, oc), 2e-3, rtol, what);
        expect_close(get(*b.gpu, sg), get(*b.cpu, sc), 1e-4, 1e-3, what + " state");
    }
}

TEST(CudaKernels, GatedDeltaRuleChainedCalls) {
    GRIMOIRE_REQUIRE_GPU();
    gdn_case(DType::BF16, 2, 6, 128, 128, {17, 1, 3, 1, 65, 63, 1031}, kRtolBf16);  // 27B head sizes
    gdn_case(DType::BF16, 2, 6, 16, 24, {70, 1, 1, 60}, kRtolBf16);                 // the fixture's dk != dv
    gdn_case(DType::F32, 1, 3, 32, 40, {65, 1, 3}, 1e-4);
}

void matmul_case(int64_t T, int64_t K, int64_t N, DType act, double rtol) {
    Backends b(act);
    const auto w = rand_bf16(static_cast<size_t>(N * K), 40), x = rand_bf16(static_cast<size_t>(T * K), 41);
    Tensor wc = put(*b.cpu, w, DType::BF16, {N, K}), wg = put(*b.gpu, w, DType::BF16, {N, K});
    Tensor xc = put(*b.cpu, x, DType::F32, {T, K}), xg = put(*b.gpu, x, act, {T, K});
    Tensor oc = b.cpu->scratch(DType::F32, {T, N}), og = b.gpu->scratch(act, {T, N});
    b.cpu->matmul(xc, wc, oc);
    b.gpu->matmul(xg, wg, og);
    // Sums of K products of size ~1/3: an absolute floor of sqrt(K) * 1e-3 covers cancellation.
    expect_close(get(*b.gpu, og), get(*b.cpu, oc), 1e-3 * std::sqrt(double(K)), rtol,
                 "matmul T=" + std::to_string(T) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
}

TEST(CudaKernels, MatmulGemvAndCublas) {
    GRIMOIRE_REQUIRE_GPU();
    for (int64_t T : {1, 3, 8, 17, 63, 65, 1031}) {
        matmul_case(T, 1024, 333, DType::BF16, kRtolBf16);
        matmul_case(T, 1000, 77, DType::F32, 1e-4);
    }
    matmul_case(1, 999, 65, DType::BF16, kRtolBf16);    // K % 8 != 0: the scalar gemv path
    matmul_case(2, 5120, 4096, DType::BF16, kRtolBf16);  // 27B-like width
}

TEST(CudaKernels, ArgmaxAndSampleOnDevice) {
    GRIMOIRE_REQUIRE_GPU();
    Backends b;
    const int64_t R = 3, V = 248320;
    auto logits = rand_bf16(static_cast<size_t>(R * V), 50, -10, 10);
    logits[static_cast<size_t>(1 * V + 7)] = 20.0f;  // a tie at the top of row 1: the lower index wins
    logits[static_cast<size_t>(1 * V + 9)] = 20.0f;
    Tensor lg = put(*b.gpu, logits, DType::F32, {R, V});
    Tensor out = b.gpu->alloc_persistent(DType::I32, {R});
    b.gpu->argmax(lg, out);
    std::vector<int32_t> got(R);
    b.gpu->to_host(out, got.data());
    for (int64_t r = 0; r < R; ++r) {
        const float* row = &logits[static_cast<size_t>(r * V)];
        EXPECT_EQ(got[static_cast<size_t>(r)], std::max_element(row, row + V) - row) << "row " << r;
    }
    // BF16 logits (the decode step's, whole 16-byte pieces: the vectorized path), the tie again and a NaN, which
    // never wins.
    {
        auto lb = logits;
        lb[static_cast<size_t>(2 * V + 3)] = NAN;
        Tensor lg16 = put(*b.gpu, lb, DType::BF16, {R, V});
        b.gpu->argmax(lg16, out);
        b.gpu->to_host(out, got.data());
        for (int64_t r = 0; r < R; ++r) {
            int64_t want = -1;
            for (int64_t i = 0; i < V; ++i) {
                const float v = lb[static_cast<size_t>(r * V + i)];
                if (!std::isnan(v) && (want < 0 || v > lb[static_cast<size_t>(r * V + want)])) want = i;
            }
            EXPECT_EQ(got[static_cast<size_t>(r)], want) << "bf16 row " << r;
        }
        b.gpu->free_persistent(lg16);
    }
    // Sampling: the host replays the same rule (top-k sorted, softmax at temperature, top-p prefix,
    // inverse CDF with the given uniform) and must pick the same token.
    const float temp = 0.7f, top_p = 0.9f;
    const int top_k = 20;
    const std::vector<float> u = {0.05f, 0.5f, 0.93f};
    Tensor ug = b.gpu->upload_raw(u.data(), DType::F32, {R});
    b.gpu->sample(lg, ug, temp, top_k, top_p, out);
    b.gpu->to_host(out, got.data());
    for (int64_t r = 0; r < R; ++r) {
        const float* row = &logits[static_cast<size_t>(r * V)];
        std::vector<int> idx(static_cast<size_t>(V));
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + top_k, idx.end(),
                          [&](int a, int c) { return row[a] > row[c] || (row[a] == row[c] && a < c); });
        std::vector<double> p(top_k);
        double sum = 0;
        for (int i = 0; i < top_k; ++i) sum += p[static_cast<size_t>(i)] = std::exp((row[idx[static_cast<size_t>(i)]] - row[idx[0]]) / temp);
        int keep = top_k;
        double cum = 0;
        for (int i = 0; i < top_k; ++i)
            if ((cum += p[static_cast<size_t>(i)] / sum) >= top_p) {
                keep = i + 1;
                break;
            }
        double kept = 0;
        for (int i = 0; i < keep; ++i) kept += p[static_cast<size_t>(i)];
        double acc = 0;
        int pick = idx[0];
        for (int i = 0; i < keep; ++i)
            if (u[static_cast<size_t>(r)] * kept < (acc += p[static_cast<size_t>(i)])) {
                pick = idx[static_cast<size_t>(i)];
                break;
            }
        EXPECT_EQ(got[static_cast<size_t>(r)], pick) << "sample row " << r;
    }
    b.gpu->free_persistent(out);
}

}  // namespace
}  // namespace grimoire
