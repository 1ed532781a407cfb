// The W8A8 FP8 block GEMM of the FP8 prefill path: cuBLASLt's block-scaled FP8 matmul (cuBLAS >= 12.9, sm_90
// only), 1 x 128 scales on the activations (VEC128_32F) and 128 x 128 on the weight (BLK128x128_32F), so a
// DeepSeek-style FP8 checkpoint's weight_scale_inv is used as stored and the GEMM runs at the FP8 tensor-core
// rate instead of dequantizing the weight to BF16 for a BF16 GEMM.
//
// Row-major y [M, N] = x [M, K] w^T is column-major y^T [N, M] = op_T(w viewed as K x N) x^T: cuBLASLt's A is
// the weight (K x N, ld K, transposed) and B the activations (K x M4, ld K). Its scale layouts, as the cuBLAS
// documentation and torch._scaled_mm describe them: A's 128 x 128 scales are K-block fastest with a leading
// dimension padded to 4 ([ceil(N / 128)][round_up(K / 128, 4)], a checkpoint's [N / 128][K / 128] when
// K / 128 % 4 == 0); B's 1 x 128 scales are M fastest ([K / 128][M4], quant_act_fp8's layout).
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant.h"

namespace grimoire::cuda {

namespace {

cublasLtHandle_t lt_handle() {
    static const cublasLtHandle_t h = [] {
        cublasLtHandle_t x = nullptr;
        return cublasLtCreate(&x) == CUBLAS_STATUS_SUCCESS ? x : nullptr;
    }();
    return h;
}

void lt_check(cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS)
        throw Error(std::string("cuBLASLt ") + cublasGetStatusString(st) + " in " + what +
                    " (gemm_fp8_block)");
}

// The descriptors of one shape; the scale pointers are attributes of the operation, set per call.
struct Descs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    Descs(int64_t M4, int64_t N, int64_t K) {
        lt_check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        const cublasLtMatmulMatrixScale_t sa = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                          sb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TRANSA");
        lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "TRANSB");
        lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &sa, sizeof(sa)),
                 "A_SCALE_MODE");
        lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &sb, sizeof(sb)),
                 "B_SCALE_MODE");
        lt_check(cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, static_cast<uint64_t>(K),
                                            static_cast<uint64_t>(N), K),
                 "layout A");
        lt_check(cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, static_cast<uint64_t>(K),
                                            static_cast<uint64_t>(M4), K),
                 "layout B");
        lt_check(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, static_cast<uint64_t>(N),
                                            static_cast<uint64_t>(M4), N),
                 "layout D");
    }
    ~Descs() {
        if (d) cublasLtMatrixLayoutDestroy(d);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
    Descs(const Descs&) = delete;
    Descs& operator=(const Descs&) = delete;
};

// One shape's descriptors and the heuristic's first choice for them, asked once: the engine asks at record
// time, so a graph capture never waits on it. Operands are only promised 16-byte alignment (per-part
// pointers, scratch).
struct Plan {
    bool ok = false;
    std::unique_ptr<Descs> ds;
    cublasLtMatmulAlgo_t algo{};
};

// Plans by (M4, N, K, workspace), and the lock that also covers a launch's use of a plan's descriptors (the
// scale pointers are set on them per call).
std::mutex plans_mu;

Plan& plan_locked(int64_t M4, int64_t N, int64_t K, size_t ws_bytes) {
    static std::map<std::tuple<int64_t, int64_t, int64_t, size_t>, Plan> plans;
    auto [it, fresh] = plans.try_emplace({M4, N, K, ws_bytes});
    Plan& p = it->second;
    if (!fresh || !lt_handle() || M4 <= 0 || M4 % 4 || N <= 0 || N % 16 || K <= 0 || K % 128) return p;
    try {
        p.ds = std::make_unique<Descs>(M4, N, K);
        cublasLtMatmulPreference_t pref = nullptr;
        lt_check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
        const uint32_t align = 16;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                             sizeof(ws_bytes));
        for (auto attr :
             {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
              CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
            cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
        cublasLtMatmulHeuristicResult_t r{};
        int n = 0;
        const Descs& ds = *p.ds;
        // cuBLASLt 13.1 refuses the heuristic for a block scale mode without a scale pointer ("requires a custom
        // pointer for A scale"): any non-null, aligned value serves here; each call sets the real ones.
        const void* placeholder = reinterpret_cast<const void*>(uintptr_t{256});
        lt_check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder,
                                                sizeof(placeholder)),
                 "A_SCALE_POINTER");
        lt_check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder,
                                                sizeof(placeholder)),
                 "B_SCALE_POINTER");
        const cublasStatus_t st =
            cublasLtMatmulAlgoGetHeuristic(lt_handle(), ds.op, ds.a, ds.b, ds.d, ds.d, pref, 1, &r, &n);
        cublasLtMatmulPreferenceDestroy(pref);
        if (st == CUBLAS_STATUS_SUCCESS && n > 0 && r.state == CUBLAS_STATUS_SUCCESS)
            p.ok = true, p.algo = r.algo;
    } catch (const Error&) {
        p.ok = false;  // a descriptor this cuBLAS does not know: no block-scaled FP8 here
    }
    return p;
}

}  // namespace

bool gemm_fp8_block_ok(int64_t M4, int64_t N, int64_t K, size_t lt_ws_bytes) {
    std::lock_guard<std::mutex> lock(plans_mu);
    return plan_locked(M4, N, K, lt_ws_bytes).ok;
}

void gemm_fp8_block(const Fp8BlockGemm& g, cudaStream_t s) {
    const auto misaligned = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) != 0; };
    if (misaligned(g.wq) || misaligned(g.xq) || misaligned(g.y) || misaligned(g.ws) || misaligned(g.xs))
        throw Error("cuda gemm_fp8_block: operands and scales must be 16-byte aligned");
    std::lock_guard<std::mutex> lock(plans_mu);
    const Plan& p = plan_locked(g.M4, g.N, g.K, g.lt_ws_bytes);
    if (!p.ok)
        throw Error("cuda gemm_fp8_block: cuBLASLt has no block-scaled FP8 algorithm for M4 " +
                    std::to_string(g.M4) + ", N " + std::to_string(g.N) + ", K " + std::to_string(g.K) +
                    " on this device");
    const Descs& ds = *p.ds;
    lt_check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.ws, sizeof(g.ws)),
             "A_SCALE_POINTER");
    lt_check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.xs, sizeof(g.xs)),
             "B_SCALE_POINTER");
    const float alpha = 1.0f, beta = 0.0f;
    lt_check(cublasLtMatmul(lt_handle(), ds.op, &alpha, g.wq, ds.a, g.xq, ds.b, &beta, g.y, ds.d, g.y, ds.d,
                            &p.algo, g.lt_ws, g.lt_ws_bytes, s),
             "Matmul");
}

}  // namespace grimoire::cuda
