// Per-kernel timings of the CUDA backend at Qwen3.5-27B shapes, to attribute a prefill or decode step:
//   bench_cuda_kernels [--tokens 4096] [--lt-sweep]
// Each op runs through CudaBackend (graphs off, so every call launches directly) 2 times untimed and 5 timed
// with CUDA events; prints milliseconds per call and, for memory-bound ops, GB/s.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/split_cols.h"

using namespace grimoire;

namespace {

double time_ms(CudaBackend& be, const std::function<void()>& f) {
    for (int i = 0; i < 2; ++i) f();
    be.synchronize();
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, be.stream());
    const int reps = 5;
    for (int i = 0; i < reps; ++i) f();
    cudaEventRecord(b, be.stream());
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms / reps;
}

void report(const char* what, double ms, double bytes, double flops) {
    std::printf("%-44s %9.3f ms", what, ms);
    if (bytes > 0) std::printf("  %7.0f GB/s", bytes / (ms * 1e-3) / 1e9);
    if (flops > 0) std::printf("  %7.1f TFLOP/s", flops / (ms * 1e-3) / 1e12);
    std::printf("\n");
}

// --lt-sweep: out [T, N] = x [T, K] w^T through cuBLASLt for every algorithm its heuristic offers (up to 64) and,
// for the first 4, split-K 2 / 3 / 4 with the workspace reduction; prints the 6 fastest with their configuration
// beside the cublasGemmEx figure of the backend. Operands uniform random (w +-0.02, x +-1).
void lt_sweep(CudaBackend& be, int64_t T, int64_t N, int64_t K) {
    auto cfg = [](const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t at) {
        uint32_t v = 0;
        size_t got = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&a, at, &v, sizeof(v), &got);
        return v;
    };
    Tensor w = be.alloc_persistent(DType::BF16, {N, K}), x = be.alloc_persistent(DType::BF16, {T, K});
    Tensor y = be.alloc_persistent(DType::BF16, {T, N});
    cuda::random_fill(w.data, DType::BF16, N * K, 11, 0.02f, 0.0f, be.stream());
    cuda::random_fill(x.data, DType::BF16, T * K, 12, 1.0f, 0.0f, be.stream());
    const double flops = 2.0 * T * N * K;
    const double ref = time_ms(be, [&] { be.matmul(x, w, y); });
    std::printf("lt sweep [%lld, %lld] x [%lld, %lld]: cublasGemmEx %.4f ms (%.0f TFLOP/s)\n",
                static_cast<long long>(T), static_cast<long long>(K), static_cast<long long>(N),
                static_cast<long long>(K), ref, flops / (ref * 1e-3) / 1e12);
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    const size_t ws_bytes = 64ull << 20;
    void* ws = nullptr;
    cudaMalloc(&ws, ws_bytes);
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    cublasLtMatrixLayout_t la, lb, lc;  // column-major views: w^T [K, N] (op T), x^T [K, T], y^T [N, T]
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, static_cast<uint64_t>(K), static_cast<uint64_t>(N), K);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, static_cast<uint64_t>(K), static_cast<uint64_t>(T), K);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, static_cast<uint64_t>(N), static_cast<uint64_t>(T), N);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes));
    std::vector<cublasLtMatmulHeuristicResult_t> res(64);
    int n = 0;
    cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 64, res.data(), &n);
    std::vector<cublasLtMatmulAlgo_t> algos;
    for (int i = 0; i < n; ++i)
        if (res[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS) algos.push_back(res[static_cast<size_t>(i)].algo);
    const size_t n_heur = algos.size();
    for (size_t i = 0; i < std::min<size_t>(4, n_heur); ++i)
        for (uint32_t sk : {2u, 3u, 4u}) {
            cublasLtMatmulAlgo_t a = algos[i];
            const uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof(sk));
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red));
            cublasLtMatmulHeuristicResult_t chk{};
            if (cublasLtMatmulAlgoCheck(lt, op, la, lb, lc, lc, &a, &chk) == CUBLAS_STATUS_SUCCESS &&
                chk.workspaceSize <= ws_bytes)
                algos.push_back(a);
        }
    const float alpha = 1.0f, beta = 0.0f;
    std::vector<std::pair<double, size_t>> times;
    for (size_t i = 0; i < algos.size(); ++i) {
        bool ok = true;
        const double ms = time_ms(be, [&] {
            ok = ok && cublasLtMatmul(lt, op, &alpha, w.data, la, x.data, lb, &beta, y.data, lc, y.data, lc, &algos[i],
                                      ws, ws_bytes, be.stream()) == CUBLAS_STATUS_SUCCESS;
        });
        if (ok) times.emplace_back(ms, i);
    }
    std::sort(times.begin(), times.end());
    std::printf("  %zu heuristic + %zu split-K variants timed\n", n_heur, algos.size() - n_heur);
    for (size_t r = 0; r < std::min<size_t>(6, times.size()); ++r) {
        const auto& a = algos[times[r].second];
        std::printf("  %.4f ms %4.0f TFLOP/s  %s id %u tile %u stages %u splitK %u red %u swizzle %u cluster %u\n",
                    times[r].first, flops / (times[r].first * 1e-3) / 1e12,
                    times[r].second < n_heur ? "heur " : "split", cfg(a, CUBLASLT_ALGO_CONFIG_ID),
                    cfg(a, CUBLASLT_ALGO_CONFIG_TILE_ID), cfg(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                    cfg(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), cfg(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                    cfg(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), cfg(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
    cudaFree(ws);
    cublasLtDestroy(lt);
    be.free_persistent(w), be.free_persistent(x), be.free_persistent(y);
}

}  // namespace

int main(int argc, char** argv) {
    int64_t T = 4096;
    bool sweep = false;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--tokens" && i + 1 < argc) T = std::stoll(argv[++i]);
        else if (std::string(argv[i]) == "--lt-sweep") sweep = true;
    }
    try {
        CudaBackend be(0, DType::BF16);
        be.set_graphs(false);
        be.set_random_weights(1);
        const int64_t H = 5120, I = 17408, Hq = 24, Hkv = 4, D = 256, Hk = 16, Hv = 48, dk = 128, dv = 128;
        if (sweep) {  // the N = 5120 output projections, and gate / up for comparison
            lt_sweep(be, T, H, Hv * dv);
            lt_sweep(be, T, H, I);
            lt_sweep(be, T, I, H);
            return 0;
        }
        const int64_t C = 2 * Hk * dk + Hv * dv;
        auto W = [&](int64_t n, int64_t k) {
            TensorInfo ti;
            ti.name = "w";
            ti.dtype = DType::BF16;
            ti.shape = {n, k};
            return be.upload(ti, DType::BF16);
        };
        auto S = [&](std::initializer_list<int64_t> s, DType dt = DType::BF16) { return be.alloc_persistent(dt, s); };
        std::printf("T = %lld\n", static_cast<long long>(T));
        Tensor x = S({T, H}), y = S({T, H}), g = S({T, I}), u = S({T, I});
        Tensor wn = S({H}, DType::F32);
        Tensor wgate = W(I, H), wdown = W(H, I), wqkv = W(C, H), wq = W(2 * Hq * D, H);
        report("matmul gate_proj [T,5120]x[17408,5120]", time_ms(be, [&] { be.matmul(x, wgate, g); }), 0, 2.0 * T * I * H);
        report("matmul down_proj [T,17408]x[5120,17408]", time_ms(be, [&] { be.matmul(g, wdown, x); }), 0, 2.0 * T * I * H);
        Tensor mixed = S({T, C});
        report("matmul in_proj_qkv [T,5120]x[10240,5120]", time_ms(be, [&] { be.matmul(x, wqkv, mixed); }), 0, 2.0 * T * C * H);
        {  // the other projection shapes of a 27B layer, and stacked groups: one GEMM + split vs a GEMM per part
            auto gemm = [&](const char* what, int64_t n, int64_t k) {
                Tensor wt = W(n, k), xi = S({T, k}), yo = S({T, n});
                report(what, time_ms(be, [&] { be.matmul(xi, wt, yo); }), 0, 2.0 * T * n * k);
                be.free_persistent(wt), be.free_persistent(xi), be.free_persistent(yo);
            };
            gemm("matmul z [T,5120]x[6144,5120]", Hv * dv, H);
            gemm("matmul b or a [T,5120]x[48,5120]", Hv, H);
            gemm("matmul out/o_proj [T,6144]x[5120,6144]", H, Hv * dv);
            gemm("matmul k or v [T,5120]x[1024,5120]", Hkv * D, H);
            auto group = [&](const char* what, std::vector<int64_t> widths) {
                int64_t n = 0;
                for (int64_t w : widths) n += w;
                Tensor wt = W(n, H);
                std::vector<Tensor> ys;
                for (int64_t w : widths) ys.push_back(S({T, w}));
                // The stacked GEMM + split forced (the backend's wave model may choose either), then per part.
                Tensor yall = S({T, n});
                const double one = time_ms(be, [&] {
                    be.matmul(x, wt, yall);
                    cuda::split_cols(yall, ys.data(), static_cast<int>(ys.size()), be.stream());
                });
                const double per = time_ms(be, [&] { be.Backend::matmul_split(x, wt, ys.data(), ys.size()); });
                const double chosen = time_ms(be, [&] { be.matmul_split(x, wt, ys.data(), ys.size()); });
                report((std::string(what) + ": one GEMM + split_cols").c_str(), one, 0, 2.0 * T * n * H);
                report((std::string(what) + ": GEMM per part").c_str(), per, 0, 2.0 * T * n * H);
                report((std::string(what) + ": backend's choice").c_str(), chosen, 0, 2.0 * T * n * H);
                be.free_persistent(yall);
                for (auto& y : ys) be.free_persistent(y);
                be.free_persistent(wt);
            };
            group("group gate|up 2x17408", {I, I});
            group("group qkv|z|b|a 10240|6144|48|48", {C, Hv * dv, Hv, Hv});
            group("group q|k|v 12288|1024|1024", {2 * Hq * D, Hkv * D, Hkv * D});
        }
        report("rmsnorm [T,5120]", time_ms(be, [&] { be.rmsnorm(x, wn, 1e-6f, NormKind::PLUS_ONE, y); }), 4.0 * T * H, 0);
        report("add [T,5120]", time_ms(be, [&] { be.add(x, y, x); }), 6.0 * T * H, 0);
        {  // the residual add + norm after every down / out / o projection (x, y read; x, out written)
            Tensor xo = S({T, H});
            report("add_rmsnorm [T,5120]", time_ms(be, [&] { be.add_rmsnorm(x, y, wn, 1e-6f, NormKind::PLUS_ONE, xo); }),
                   8.0 * T * H, 0);
            be.free_persistent(xo);
        }
        report("silu_mul [T,17408]", time_ms(be, [&] { be.silu_mul(g, u, g); }), 6.0 * T * I, 0);
        Tensor conv = S({T, C}), cst = S({3, C}), cw = S({C, 4}, DType::F32);
        report("conv1d_silu [T,10240]", time_ms(be, [&] { be.conv1d_silu(mixed, cw, cst, conv); }), 4.0 * T * C, 0);
        Tensor q = S({T, Hk * dk}), k = S({T, Hk * dk}), v = S({T, Hv * dv});
        report("copy_cols q [T,2048] of [T,10240]", time_ms(be, [&] { be.copy_cols(conv, 0, q); }), 4.0 * T * Hk * dk, 0);
        Tensor a = S({T, Hv}), b = S({T, Hv}), Al = S({Hv}, DType::F32), dtb = S({Hv}, DType::F32);
        Tensor st = S({Hv, dk, dv}, DType::F32), o = S({T, Hv, dv});
        report("gated_delta_rule (chunked if T>=64)", time_ms(be, [&] {
                   be.reset_scratch();
                   Tensor q3 = q.view({T, Hk, dk}), k3 = k.view({T, Hk, dk}), v3 = v.view({T, Hv, dv});
                   be.gated_delta_rule(q3, k3, v3, a, b, Al, dtb, st, o);
               }), 0, 0);
        Tensor z = S({T * Hv, dv}), wg = S({dv}, DType::F32), on = S({T * Hv, dv});
        report("rmsnorm_gated [T*48,128]", time_ms(be, [&] { be.rmsnorm_gated(o.view({T * Hv, dv}), z, wg, 1e-6f, on); }), 8.0 * T * Hv * dv, 0);
        Tensor qg = S({T, 2 * Hq * D});
        report("matmul q_proj [T,5120]x[12288,5120]", time_ms(be, [&] { be.matmul(x, wq, qg); }), 0, 2.0 * T * 2 * Hq * D * H);
        Tensor qa = S({T * Hq, D}), ka = S({T, Hkv, D}), va = S({T, Hkv, D}), att = S({T, Hq, D});
        report("copy_cols query [T*24,256] of [T*24,512]", time_ms(be, [&] { be.copy_cols(qg.view({T * Hq, 2 * D}), 0, qa); }), 4.0 * T * Hq * D, 0);
        Tensor wqn = S({D}, DType::F32);
        report("rmsnorm q_norm [T*24,256]", time_ms(be, [&] { be.rmsnorm(qa, wqn, 1e-6f, NormKind::PLUS_ONE, qa); }), 4.0 * T * Hq * D, 0);
        RopeParams rp;
        rp.rot_dim = 64;
        for (int i = 0; i < 32; ++i) rp.inv_freq.push_back(std::pow(1e7f, -i / 32.0f));
        std::vector<int32_t> pos(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(t);
        Tensor pg = be.upload_raw(pos.data(), DType::I32, {T});
        Tensor q3 = qa.view({T, Hq, D});
        report("rope q [T,24,256]", time_ms(be, [&] { be.rope(q3, pg, rp); }), 0, 0);
        Tensor kc = S({T + 8, Hkv, D}), vc = S({T + 8, Hkv, D});
        report("attention prefill (causal, n_past 0)", time_ms(be, [&] { be.attention(q3, ka, va, kc, vc, 0, 0.0625f, att); }), 0,
               4.0 * Hq * D * (static_cast<double>(T) * T / 2));
        {  // the same prompt continuing a cached prefix of T rows (a second prefill chunk): T^2 + T^2 / 2 pairs
            Tensor kcp = S({2 * T + 8, Hkv, D}), vcp = S({2 * T + 8, Hkv, D});
            report("attention prefill (causal, n_past T)", time_ms(be, [&] { be.attention(q3, ka, va, kcp, vcp, T, 0.0625f, att); }),
                   0, 4.0 * Hq * D * (1.5 * static_cast<double>(T) * T));
        }
        {  // head_dim 128 (32 query / 8 KV heads, a Qwen3-8B layer)
            const int64_t Hq2 = 32, Hkv2 = 8, D2 = 128;
            Tensor q2 = S({T, Hq2, D2}), k2 = S({T, Hkv2, D2}), v2 = S({T, Hkv2, D2}), o2 = S({T, Hq2, D2});
            Tensor kc2 = S({T + 8, Hkv2, D2}), vc2 = S({T + 8, Hkv2, D2});
            report("attention prefill D=128 32q/8kv (causal)",
                   time_ms(be, [&] { be.attention(q2, k2, v2, kc2, vc2, 0, 0.088f, o2); }), 0,
                   4.0 * Hq2 * D2 * (static_cast<double>(T) * T / 2));
        }
        report("mul_sigmoid [T,6144]", time_ms(be, [&] { be.mul_sigmoid(att, att); }), 6.0 * T * Hq * D, 0);
        // decode-shaped
        Tensor x1 = S({1, H}), g1 = S({1, I}), l1 = S({1, 248320});
        Tensor wlm = W(248320, H);
        report("gemv gate_proj T=1", time_ms(be, [&] { be.matmul(x1, wgate, g1); }), 2.0 * I * H, 0);
        report("gemv down_proj T=1", time_ms(be, [&] { be.matmul(g1, wdown, x1); }), 2.0 * I * H, 0);
        report("gemv lm_head T=1", time_ms(be, [&] { be.matmul(x1, wlm, l1); }), 2.0 * 248320 * H, 0);
        Tensor x1b = S({1, H});
        report("add T=1 [1,5120] (launch floor)", time_ms(be, [&] { be.add(x1, x1b, x1); }), 0, 0);
        Tensor st1 = S({Hv, dk, dv}, DType::F32);
        Tensor q1 = S({1, Hk, dk}), k1 = S({1, Hk, dk}), v1 = S({1, Hv, dv}), a1 = S({1, Hv}), b1 = S({1, Hv}), o1 = S({1, Hv, dv});
        report("gated_delta_rule T=1", time_ms(be, [&] { be.gated_delta_rule(q1, k1, v1, a1, b1, Al, dtb, st1, o1); }),
               2.0 * Hv * dk * dv * 4, 0);
        Tensor kcl = S({32768 + 8, Hkv, D}), vcl = S({32768 + 8, Hkv, D});
        Tensor qd = S({1, Hq, D}), kd = S({1, Hkv, D}), vd = S({1, Hkv, D}), od = S({1, Hq, D});
        for (int64_t n : {int64_t{0}, int64_t{4096}, int64_t{32768}})
            report(("attention decode n_past " + std::to_string(n)).c_str(),
                   time_ms(be, [&] { be.attention(qd, kd, vd, kcl, vcl, n, 0.0625f, od); }),
                   2.0 * static_cast<double>(n + 1) * Hkv * D * 2, 0);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cuda_kernels: %s\n", e.what());
        return 1;
    }
    return 0;
}
