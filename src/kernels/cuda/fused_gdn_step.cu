// The Gated DeltaNet recurrence for short inputs (decode) fused with what surrounds it in
// Backend::gdn_core: q, k and v are read in place from the conv output [T, q | k | v] (no copy_cols), and
// the gated RMSNorm of each value head, w * rmsnorm(o) * silu(z), is applied before o leaves the block.
//
// Block = one value head h, kRowGroups x kCols threads: thread (tx, ty) keeps state column j = tx for rows
// ty, ty + kRowGroups, ... (dk / kRowGroups of them, in registers) for the whole call, so the state is read
// and written once. Per token: L2-normalise q, k of key head h / (Hv / Hk), decay, u = beta (v - S^T k),
// S += k u^T, o = S^T q (column sums over row groups through shared memory), then the norm over the dv
// columns of the head. o is rounded to the output dtype before the norm, as the unfused sequence stored it.
#include "kernels/cuda/fused_util.cuh"
#include "kernels/cuda/gdn_recurrence.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

namespace {
constexpr int kRowGroups = 8;
constexpr int kCols = 128;  // max dv
constexpr int kMaxDk = 128;
constexpr int kRowsPerThread = kMaxDk / kRowGroups;

struct StepArgs {
    const void* conv;  // [T, C] q | k | v after conv + SiLU
    const void* a;     // [T, Hv]
    const void* b;     // [T, Hv]
    const void* A_log;    // [Hv]
    const void* dt_bias;  // [Hv]
    const void* z;        // [T, Hv * dv]
    const void* w;        // [dv]
    float* state;         // [Hv, dk, dv]
    void* out;            // [T, Hv * dv]
    int cdt, adt, bdt, Adt, ddt, zdt, wdt, odt;
    int64_t T, C, Hk, Hv, dk, dv;
    float eps;
};
}  // namespace

static __global__ void __launch_bounds__(kRowGroups * kCols) gdn_step_kernel(StepArgs p) {
    __shared__ float qn[kMaxDk], kn[kMaxDk];
    __shared__ float part[kRowGroups][kCols];
    __shared__ float red[32];
    const int tx = threadIdx.x % kCols, ty = threadIdx.x / kCols, tid = threadIdx.x;
    const int64_t h = blockIdx.x, kh = h / (p.Hv / p.Hk), key = p.Hk * p.dk;
    const int64_t j = tx;
    const bool col_ok = j < p.dv;
    const int nr = static_cast<int>((p.dk - ty + kRowGroups - 1) / kRowGroups);
    float* S = p.state + h * p.dk * p.dv;

    float s[kRowsPerThread];
    gdn::load_state<kRowGroups>(s, S, nr, ty, j, p.dv, col_ok);

    const float A = expf(ld(p.A_log, p.Adt, h));
    const float dtb = ld(p.dt_bias, p.ddt, h);
    const float qscale = rsqrtf(static_cast<float>(p.dk));
    const float wj = col_ok ? ld(p.w, p.wdt, j) : 0.0f;
    for (int64_t t = 0; t < p.T; ++t) {
        const int64_t row = t * p.C;
        const float qv = tid < p.dk ? ld(p.conv, p.cdt, row + kh * p.dk + tid) : 0.0f;
        const float kv = tid < p.dk ? ld(p.conv, p.cdt, row + key + kh * p.dk + tid) : 0.0f;
        const float vj = col_ok ? ld(p.conv, p.cdt, row + 2 * key + h * p.dv + j) : 0.0f;
        const float av = ld(p.a, p.adt, t * p.Hv + h), bv = ld(p.b, p.bdt, t * p.Hv + h);
        const float zj = col_ok ? ld(p.z, p.zdt, (t * p.Hv + h) * p.dv + j) : 0.0f;
        gdn::normalise_qk(qv, kv, tid, p.dk, qscale, qn, kn, red);
        const float decay = expf(-A * gdn::softplus_(av + dtb));
        const float beta = 1.0f / (1.0f + expf(-bv));
        float oj = gdn::token_step(s, nr, tx, ty, qn, kn, decay, beta, vj, part);
        oj = round_as(p.odt, oj);
        // Gated RMSNorm over the head's dv outputs (row group 0 holds one copy of each column).
        const float ss = block_sum(ty == 0 && col_ok ? oj * oj : 0.0f, red);
        const float r = rsqrtf(ss / static_cast<float>(p.dv) + p.eps);
        if (ty == 0 && col_ok)
            st(p.out, p.odt, (t * p.Hv + h) * p.dv + j, wj * oj * r * zj * sigmoidf_(zj));
        __syncthreads();  // part[], qn, kn are rewritten by the next token
    }
    gdn::store_state<kRowGroups>(s, S, nr, ty, j, p.dv, col_ok);
}

void gdn_step_fused(const Tensor& conv, const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                    Tensor& state, const Tensor& z, const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out,
                    cudaStream_t s) {
    const char* op = "gdn_core";
    if (state.ndim != 3 || state.dtype != DType::F32) throw Error("cuda gdn_core: state must be [Hv, dk, dv] F32");
    StepArgs p{};
    p.T = conv.rows();
    p.C = conv.cols();
    p.Hk = n_k_heads;
    p.Hv = state.dim(0);
    p.dk = state.dim(1);
    p.dv = state.dim(2);
    if (p.Hk <= 0 || p.Hv % p.Hk != 0 || p.C != 2 * p.Hk * p.dk + p.Hv * p.dv)
        throw Error("cuda gdn_core: conv must be [T, 2 Hk dk + Hv dv] with Hv a multiple of Hk");
    if (p.dk > kMaxDk || p.dv > kCols) throw Error("cuda gdn_core: dk and dv must be <= 128");
    if (a.numel() != p.T * p.Hv || b.numel() != p.T * p.Hv || A_log.numel() != p.Hv || dt_bias.numel() != p.Hv ||
        z.numel() != p.T * p.Hv * p.dv || norm_w.numel() != p.dv || out.numel() != p.T * p.Hv * p.dv)
        throw Error("cuda gdn_core: a, b [T, Hv], A_log, dt_bias [Hv], z, out [T, Hv * dv], norm [dv]");
    if (p.T == 0) return;
    p.conv = conv.data; p.cdt = dt_code(conv.dtype, op, "conv");
    p.a = a.data; p.adt = dt_code(a.dtype, op, "a");
    p.b = b.data; p.bdt = dt_code(b.dtype, op, "b");
    p.A_log = A_log.data; p.Adt = dt_code(A_log.dtype, op, "A_log");
    p.dt_bias = dt_bias.data; p.ddt = dt_code(dt_bias.dtype, op, "dt_bias");
    p.z = z.data; p.zdt = dt_code(z.dtype, op, "z");
    p.w = norm_w.data; p.wdt = dt_code(norm_w.dtype, op, "norm_w");
    p.state = state.ptr<float>();
    p.out = out.data; p.odt = dt_code(out.dtype, op, "out");
    p.eps = eps;
    gdn_step_kernel<<<static_cast<unsigned>(p.Hv), kRowGroups * kCols, 0, s>>>(p);
    check_launch("gdn_core step");
}

}  // namespace grimoire::cuda
