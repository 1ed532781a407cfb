// The decode-step small ops at the shapes and token counts of a decode or verify step (T = 1..8): the gemv's
// split-K and two-row variants and its split into column parts (Backend::matmul_split), the multi-token
// split-K decode attention of gated_attention_core, the one-kernel conv of a few tokens, and the tiled
// DeltaNet step; each against a host reference or the CPU twin on odd shapes, with fresh random inputs.
//
// Tolerances: the gemv is checked in fp32 against a double-precision host product (summation order only,
// rtol 1e-5 of the |w| |x| sum); the fused ops as in test_cuda_fused.cpp (F32: the CPU twin, summation
// order and fast exp only; BF16: two or three bf16 roundings of intermediates feed a softmax or a norm).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/rope_params.h"
#include "gpu_test_util.h"

namespace grimoire {
namespace {

using test::expect_close;
using test::get;
using test::poison;
using test::put;
using test::rand_bf16;

std::string act_name(DType act) { return act == DType::F32 ? " f32" : " bf16"; }

void expect_gemv(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& mag,
                 const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_LE(std::abs(double(got[i]) - want[i]), 1e-5 * mag[i] + 1e-6)
            << what << ": element " << i << " got " << got[i] << " want " << want[i];
}

TEST(CudaDecodeOps, GemvAllTokenCountsAndShapes) {
    GRIMOIRE_REQUIRE_GPU();
    auto gpu = std::make_unique<CudaBackend>(0, DType::BF16);
    uint32_t seed = 1;
    // N = 96 / 48: split-K over 8 warps per row; 1000: 4 warps; 4500 x 264: two rows per warp from T = 2 (and a
    // K tail); K = 1000 (not a multiple of 8): the scalar kernel.
    const std::pair<int64_t, int64_t> shapes[] = {{96, 5120}, {48, 5120}, {1, 136}, {7, 264}, {1000, 520},
                                                  {4500, 264}, {33, 1000}};
    for (auto [N, K] : shapes) {
        const auto w = rand_bf16(static_cast<size_t>(N * K), seed++);
        Tensor wg = put(*gpu, w, DType::BF16, {N, K});
        for (int64_t T = 1; T <= 8; ++T) {
            for (DType xdt : {DType::BF16, DType::F32}) {
                const auto x = rand_bf16(static_cast<size_t>(T * K), seed++, -2, 2);
                Tensor xg = put(*gpu, x, xdt, {T, K});
                Tensor yg = gpu->scratch(DType::F32, {T, N});
                poison(*gpu, yg);
                gpu->matmul(xg, wg, yg);
                std::vector<double> want, mag;
                test::host_matmul(x, w, T, N, K, want, mag);
                expect_gemv(get(*gpu, yg), want, mag,
                            "gemv T=" + std::to_string(T) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                                act_name(xdt));
                gpu->reset_scratch();
            }
        }
    }
}

TEST(CudaDecodeOps, MatmulSplitIntoPartsAtDecodeRows) {
    GRIMOIRE_REQUIRE_GPU();
    auto gpu = std::make_unique<CudaBackend>(0, DType::BF16);
    uint32_t seed = 100;
    const std::vector<std::vector<int64_t>> groups = {{48, 48}, {5, 3, 40}, {1000, 24, 1, 7}};
    for (const auto& widths : groups) {
        int64_t N = 0;
        for (int64_t w : widths) N += w;
        const int64_t K = 5120;
        const auto w = rand_bf16(static_cast<size_t>(N * K), seed++);
        Tensor wg = put(*gpu, w, DType::BF16, {N, K});
        for (int64_t T : {1, 2, 4, 7, 8}) {
            const auto x = rand_bf16(static_cast<size_t>(T * K), seed++, -2, 2);
            Tensor xg = put(*gpu, x, DType::BF16, {T, K});
            std::vector<Tensor> ys;
            for (int64_t wd : widths) {
                ys.push_back(gpu->scratch(DType::F32, {T, wd}));
                poison(*gpu, ys.back());
            }
            gpu->matmul_split(xg, wg, ys.data(), ys.size());
            std::vector<double> want, mag;
            test::host_matmul(x, w, T, N, K, want, mag);
            int64_t c0 = 0;
            for (size_t i = 0; i < ys.size(); ++i) {
                const int64_t wd = widths[i];
                std::vector<double> pw, pm;
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t c = 0; c < wd; ++c) {
                        pw.push_back(want[static_cast<size_t>(t * N + c0 + c)]);
                        pm.push_back(mag[static_cast<size_t>(t * N + c0 + c)]);
                    }
                expect_gemv(get(*gpu, ys[i]), pw, pm,
                            "matmul_split part " + std::to_string(i) + " of N=" + std::to_string(N) +
                                " T=" + std::to_string(T));
                c0 += wd;
            }
            gpu->reset_scratch();
        }
    }
}

Tensor positions(Backend& be, int64_t n_past, int64_t T) {
    std::vector<int32_t> p(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) p[static_cast<size_t>(t)] = static_cast<int32_t>(n_past + t);
    return be.upload_raw(p.data(), DType::I32, {T});
}

// Verify-sized steps (T tokens, each seeing the cache up to itself) after n_past cached rows, CUDA vs the CPU
// twin, for both activation dtypes; the caches are compared at the end.
void multi_token_attention(DType act, int64_t Hq, int64_t Hkv, int64_t D, int64_t n_past,
                           std::initializer_list<int64_t> steps) {
    auto cpu = make_cpu_backend();
    auto gpu = std::make_unique<CudaBackend>(0, act);
    int64_t total = n_past;
    for (int64_t s : steps) total += s;
    const int64_t max_ctx = total + 2;
    RopeParams rp;
    rp.rot_dim = 64 < D ? 64 : D;
    for (int i = 0; i < rp.rot_dim / 2; ++i)
        rp.inv_freq.push_back(std::pow(1e7f, -2.0f * static_cast<float>(i) / static_cast<float>(rp.rot_dim)));
    const float scale = 1.0f / std::sqrt(static_cast<float>(D)), eps = 1e-6f;
    const auto qw = rand_bf16(static_cast<size_t>(D), 200, -0.5f, 0.5f), kw = rand_bf16(static_cast<size_t>(D), 201, -0.5f, 0.5f);
    Tensor qwc = put(*cpu, qw, DType::F32, {D}), qwg = put(*gpu, qw, DType::F32, {D});
    Tensor kwc = put(*cpu, kw, DType::F32, {D}), kwg = put(*gpu, kw, DType::F32, {D});
    const auto kc0 = rand_bf16(static_cast<size_t>(max_ctx * Hkv * D), 202, -2, 2);
    const auto vc0 = rand_bf16(static_cast<size_t>(max_ctx * Hkv * D), 203);
    Tensor kcc = put(*cpu, kc0, DType::F32, {max_ctx, Hkv, D}), vcc = put(*cpu, vc0, DType::F32, {max_ctx, Hkv, D});
    Tensor kcg = put(*gpu, kc0, act, {max_ctx, Hkv, D}), vcg = put(*gpu, vc0, act, {max_ctx, Hkv, D});
    const bool f32 = act == DType::F32;
    const double atol = f32 ? 2e-3 : 1e-2, rtol = f32 ? 1e-4 : 2e-2;
    int64_t past = n_past;
    uint32_t seed = 210;
    for (int64_t T : steps) {
        const auto qg = rand_bf16(static_cast<size_t>(T * Hq * 2 * D), seed++, -2, 2);
        const auto k = rand_bf16(static_cast<size_t>(T * Hkv * D), seed++, -2, 2);
        const auto v = rand_bf16(static_cast<size_t>(T * Hkv * D), seed++);
        Tensor qgc = put(*cpu, qg, DType::F32, {T, Hq * 2 * D}), qgg = put(*gpu, qg, act, {T, Hq * 2 * D});
        Tensor kc = put(*cpu, k, DType::F32, {T, Hkv * D}), kg = put(*gpu, k, act, {T, Hkv * D});
        Tensor vc = put(*cpu, v, DType::F32, {T, Hkv * D}), vg = put(*gpu, v, act, {T, Hkv * D});
        Tensor pc = positions(*cpu, past, T), pg = positions(*gpu, past, T);
        Tensor oc = cpu->scratch(DType::F32, {T, Hq * D}), og = gpu->scratch(act, {T, Hq * D});
        poison(*gpu, og);
        cpu->gated_attention_core(qgc, kc, vc, qwc, kwc, eps, pc, rp, kcc, vcc, past, scale, oc);
        gpu->gated_attention_core(qgg, kg, vg, qwg, kwg, eps, pg, rp, kcg, vcg, past, scale, og);
        expect_close(get(*gpu, og), get(*cpu, oc), atol, rtol,
                     "gated_attention_core Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) + " D=" +
                         std::to_string(D) + " n_past=" + std::to_string(past) + " T=" + std::to_string(T) +
                         act_name(act));
        past += T;
    }
    expect_close(get(*gpu, kcg), get(*cpu, kcc), atol, rtol, "k_cache" + act_name(act));
    expect_close(get(*gpu, vcg), get(*cpu, vcc), 0, 0, "v_cache" + act_name(act));
}

TEST(CudaDecodeOps, GatedAttentionVerifySteps) {
    GRIMOIRE_REQUIRE_GPU();
    for (DType act : {DType::BF16, DType::F32}) {
        multi_token_attention(act, 24, 4, 256, 0, {4, 1, 8, 3});      // 27B heads from an empty cache
        multi_token_attention(act, 24, 4, 256, 509, {4, 2, 7, 1});    // around length 512 (16..17 splits)
        multi_token_attention(act, 6, 2, 64, 2000, {8, 5, 1});        // 128 splits for one token, 16 each for 8
        multi_token_attention(act, 4, 4, 128, 15, {1, 6, 1});         // G = 1, split boundaries at 32 rows
        multi_token_attention(act, 16, 2, 128, 5000, {1, 3});         // G = 8, two 8-row tiles per warp
        // The tensor-core walk (BF16): lengths across its 64-row split boundary, eight tokens whose splits
        // hold many 8-key tiles per warp (the next tile in flight, a partial last tile), G = 8 at head_dim 128.
        multi_token_attention(act, 24, 4, 256, 62, {1, 1, 1, 2});
        multi_token_attention(act, 24, 4, 256, 8100, {8, 1});
        multi_token_attention(act, 8, 1, 128, 127, {2, 1});
    }
}

// conv1d_silu of T = 1..8 tokens (one kernel) against the CPU twin, carrying the state from call to call.
TEST(CudaDecodeOps, ConvFewTokens) {
    GRIMOIRE_REQUIRE_GPU();
    for (DType act : {DType::BF16, DType::F32}) {
        auto cpu = make_cpu_backend();
        auto gpu = std::make_unique<CudaBackend>(0, act);
        for (int64_t K : {4, 3}) {
            const int64_t C = 1000 + K;
            const auto w = rand_bf16(static_cast<size_t>(C * K), 300 + static_cast<uint32_t>(K));
            Tensor wc = put(*cpu, w, DType::F32, {C, K}), wg = put(*gpu, w, DType::F32, {C, K});
            const auto s0 = rand_bf16(static_cast<size_t>((K - 1) * C), 310);
            Tensor sc = put(*cpu, s0, DType::F32, {K - 1, C}), sg = put(*gpu, s0, act, {K - 1, C});
            uint32_t seed = 320;
            for (int64_t T : {1, 2, 8, 3, 1, 5}) {
                const auto x = rand_bf16(static_cast<size_t>(T * C), seed++, -2, 2);
                Tensor xc = put(*cpu, x, DType::F32, {T, C}), xg = put(*gpu, x, act, {T, C});
                Tensor oc = cpu->scratch(DType::F32, {T, C}), og = gpu->scratch(act, {T, C});
                poison(*gpu, og);
                cpu->conv1d_silu(xc, wc, sc, oc);
                gpu->conv1d_silu(xg, wg, sg, og);
                const std::string what = "conv1d_silu K=" + std::to_string(K) + " T=" + std::to_string(T) + act_name(act);
                expect_close(get(*gpu, og), get(*cpu, oc), 1e-5, act == DType::F32 ? 1e-5 : 8e-3, what);
                expect_close(get(*gpu, sg), get(*cpu, sc), 0, 0, what + " state");
            }
        }
    }
}

// gdn_core steps of T = 1..8 tokens (the tiled step kernel) at the 27B head sizes and odd ones, F32 against the
// CPU twin (the BF16 fused-vs-unfused check is test_cuda_fused's).
TEST(CudaDecodeOps, GdnCoreVerifySteps) {
    GRIMOIRE_REQUIRE_GPU();
    struct Shape {
        int64_t Hk, Hv, dk, dv;
    };
    for (Shape sh : {Shape{2, 6, 128, 128}, Shape{1, 3, 16, 24}, Shape{1, 2, 40, 96}}) {
        auto cpu = make_cpu_backend();
        auto gpu = std::make_unique<CudaBackend>(0, DType::F32);
        const int64_t C = 2 * sh.Hk * sh.dk + sh.Hv * sh.dv, K = 4, Hv = sh.Hv, dv = sh.dv;
        const float eps = 1e-6f;
        const auto cw = rand_bf16(static_cast<size_t>(C * K), 400);
        const auto A = rand_bf16(static_cast<size_t>(Hv), 401), dtb = rand_bf16(static_cast<size_t>(Hv), 402);
        const auto nw = rand_bf16(static_cast<size_t>(dv), 403, 0.5f, 1.5f);
        Tensor cwc = put(*cpu, cw, DType::F32, {C, K}), cwg = put(*gpu, cw, DType::F32, {C, K});
        Tensor Ac = put(*cpu, A, DType::F32, {Hv}), Ag = put(*gpu, A, DType::F32, {Hv});
        Tensor dc = put(*cpu, dtb, DType::F32, {Hv}), dg = put(*gpu, dtb, DType::F32, {Hv});
        Tensor nc = put(*cpu, nw, DType::F32, {dv}), ng = put(*gpu, nw, DType::F32, {dv});
        const auto s0 = rand_bf16(static_cast<size_t>(Hv * sh.dk * dv), 404, -0.3f, 0.3f);
        Tensor csc = cpu->alloc_persistent(DType::F32, {K - 1, C}), csg = gpu->alloc_persistent(DType::F32, {K - 1, C});
        cpu->zero(csc);
        gpu->zero(csg);
        Tensor sc = put(*cpu, s0, DType::F32, {Hv, sh.dk, dv}), sg = put(*gpu, s0, DType::F32, {Hv, sh.dk, dv});
        uint32_t seed = 410;
        for (int64_t T : {1, 4, 8, 2, 5, 12, 1}) {  // 12: two tiles
            auto mk = [&](int64_t n, float lo, float hi) { return rand_bf16(static_cast<size_t>(n), seed++, lo, hi); };
            const auto mixed = mk(T * C, -2, 2), a = mk(T * Hv, -3, 3), bb = mk(T * Hv, -3, 3), z = mk(T * Hv * dv, -4, 4);
            Tensor mc = put(*cpu, mixed, DType::F32, {T, C}), mg = put(*gpu, mixed, DType::F32, {T, C});
            Tensor ac = put(*cpu, a, DType::F32, {T, Hv}), ag = put(*gpu, a, DType::F32, {T, Hv});
            Tensor bc = put(*cpu, bb, DType::F32, {T, Hv}), bg = put(*gpu, bb, DType::F32, {T, Hv});
            Tensor zc = put(*cpu, z, DType::F32, {T, Hv * dv}), zg = put(*gpu, z, DType::F32, {T, Hv * dv});
            Tensor oc = cpu->scratch(DType::F32, {T, Hv * dv}), og = gpu->scratch(DType::F32, {T, Hv * dv});
            poison(*gpu, og);
            cpu->gdn_core(mc, cwc, csc, ac, bc, Ac, dc, sc, zc, nc, eps, sh.Hk, oc);
            gpu->gdn_core(mg, cwg, csg, ag, bg, Ag, dg, sg, zg, ng, eps, sh.Hk, og);
            const std::string what = "gdn_core Hk=" + std::to_string(sh.Hk) + " Hv=" + std::to_string(Hv) + " dk=" +
                                     std::to_string(sh.dk) + " dv=" + std::to_string(dv) + " T=" + std::to_string(T);
            expect_close(get(*gpu, og), get(*cpu, oc), 2e-3, 1e-4, what);
            expect_close(get(*gpu, sg), get(*cpu, sc), 1e-4, 1e-3, what + " state");
            expect_close(get(*gpu, csg), get(*cpu, csc), 0, 0, what + " conv state");
        }
    }
}

}  // namespace
}  // namespace grimoire
