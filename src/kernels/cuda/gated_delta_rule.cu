// Gated DeltaNet recurrence (models-and-formats.md §1.4 steps 4-7), token by token, fp32 state.
//
// Block = (value head h, 32-column tile of dv), 4 warps. Thread (tx, ty) keeps column j = tile*32 + tx of
// the state for rows ty, ty+4, ... (dk/4 of them, in registers) for the whole sequence, so the state is read
// and written once per call however many tokens run. Per token: L2-normalise q, k of key head h/(Hv/Hk) in
// shared memory, decay the state, u = beta (v - S^T k), S += k u^T, o = S^T q; the two column sums over rows
// are reduced across the 4 warps through shared memory.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gdn_impl.h"
#include "kernels/cuda/gdn_recurrence.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

using gdn::GdnParams;

namespace {
constexpr int kRowGroups = 4;                     // warps per block, each owning every 4th state row
constexpr int kMaxDk = 128;                       // rows per thread <= kMaxDk / kRowGroups
constexpr int kRowsPerThread = kMaxDk / kRowGroups;
}  // namespace

static __global__ void __launch_bounds__(32 * kRowGroups) gdn_recurrent_kernel(GdnParams p) {
    __shared__ float qn[kMaxDk], kn[kMaxDk];
    __shared__ float part[kRowGroups][32];
    __shared__ float red[32];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, tid = threadIdx.x;
    const int64_t h = blockIdx.x, kh = h / (p.Hv / p.Hk);
    const int64_t j = blockIdx.y * 32 + tx;
    const bool col_ok = j < p.dv;
    const int nr = static_cast<int>((p.dk - ty + kRowGroups - 1) / kRowGroups);  // rows ty, ty+4, ... < dk
    float* S = p.state + h * p.dk * p.dv;

    float s[kRowsPerThread];
    gdn::load_state<kRowGroups>(s, S, nr, ty, j, p.dv, col_ok);

    const float A = expf(ld(p.A_log, p.Adt, h));
    const float dtb = ld(p.dt_bias, p.ddt, h);
    const float qscale = rsqrtf(static_cast<float>(p.dk));
    for (int64_t t = 0; t < p.T; ++t) {
        const float qv = tid < p.dk ? ld(p.q, p.qdt, t * p.qs + kh * p.dk + tid) : 0.0f;
        const float kv = tid < p.dk ? ld(p.k, p.kdt, t * p.ks + kh * p.dk + tid) : 0.0f;
        const float vj = col_ok ? ld(p.v, p.vdt, t * p.vs + h * p.dv + j) : 0.0f;
        const float av = ld(p.a, p.adt, t * p.ab_s + h), bv = ld(p.b, p.bdt, t * p.ab_s + h);
        gdn::normalise_qk(qv, kv, tid, p.dk, qscale, qn, kn, red);
        const float decay = expf(-A * gdn::softplus_(av + dtb));
        const float beta = 1.0f / (1.0f + expf(-bv));
        const float o = gdn::token_step(s, nr, tx, ty, qn, kn, decay, beta, vj, part);
        if (ty == 0 && col_ok) st(p.out, p.odt, (t * p.Hv + h) * p.dv + j, o);
        __syncthreads();  // part[], qn, kn are rewritten by the next token
    }
    gdn::store_state<kRowGroups>(s, S, nr, ty, j, p.dv, col_ok);
}

static void launch_gdn_recurrent(const GdnParams& p, cudaStream_t s) {
    dim3 grid(static_cast<unsigned>(p.Hv), static_cast<unsigned>((p.dv + 31) / 32));
    gdn_recurrent_kernel<<<grid, 32 * kRowGroups, 0, s>>>(p);
    check_launch("gated_delta_rule");
}

size_t gated_delta_rule_ws_bytes(int64_t T, int64_t Hv, int64_t dk, int64_t dv, DType act) {
    if (T < gdn::kChunkedMinT) return 0;
    // The tensor-core path's records are ~4x smaller than the fp32 SIMT path's (27B, T = 4096: ~104 MB
    // against ~455 MB): size by the path a BF16 prompt takes (tc_supported's shape conditions).
    if (act == DType::BF16 && dk <= 128 && dk % 8 == 0 && dv % 8 == 0 && !gdn::simt_forced())
        return gdn::tc_ws_bytes(T, Hv);
    return gdn::chunked_ws_bytes(T, Hv, dk, dv);
}

namespace {
// Shape checks shared by both entry points; fills everything but the q / k / v pointers and strides.
gdn::GdnParams make_params(int64_t T, int64_t Hk, int64_t dk, int64_t Hv, int64_t dv, const Tensor& a,
                           const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, Tensor& state, Tensor& out,
                           DType qkv_dt, int64_t ab_stride) {
    const char* op = "gated_delta_rule";
    GdnParams p{};
    p.T = T;
    p.Hk = Hk;
    p.dk = dk;
    p.Hv = Hv;
    p.dv = dv;
    if (p.Hk == 0 || p.Hv % p.Hk != 0) throw Error("cuda gated_delta_rule: Hv must be a multiple of Hk");
    if (p.dk > kMaxDk) throw Error("cuda gated_delta_rule: dk " + std::to_string(p.dk) + " > 128 unsupported");
    if (a.numel() != p.T * p.Hv || b.numel() != p.T * p.Hv || A_log.numel() != p.Hv || dt_bias.numel() != p.Hv)
        throw Error("cuda gated_delta_rule: a, b must be [T, Hv] and A_log, dt_bias [Hv]");
    if (state.dtype != DType::F32 || state.numel() != p.Hv * p.dk * p.dv)
        throw Error("cuda gated_delta_rule: state must be [Hv, dk, dv] F32");
    if (out.numel() != p.T * p.Hv * p.dv) throw Error("cuda gated_delta_rule: out must be [T, Hv, dv]");
    p.qdt = p.kdt = p.vdt = dt_code(qkv_dt, op, "q/k/v");
    p.ab_s = ab_stride ? ab_stride : Hv;
    if (p.ab_s < Hv) throw Error("cuda gated_delta_rule: a / b row stride below Hv");
    p.a = a.data; p.adt = dt_code(a.dtype, op, "a");
    p.b = b.data; p.bdt = dt_code(b.dtype, op, "b");
    p.A_log = A_log.data; p.Adt = dt_code(A_log.dtype, op, "A_log");
    p.dt_bias = dt_bias.data; p.ddt = dt_code(dt_bias.dtype, op, "dt_bias");
    p.state = state.ptr<float>();
    p.out = out.data; p.odt = dt_code(out.dtype, op, "out");
    return p;
}

void run(const GdnParams& p, void* ws, size_t ws_bytes, cudaStream_t s) {
    if (p.T == 0) return;
    if (p.T >= gdn::kChunkedMinT && ws) {
        const bool tc = gdn::tc_supported(p) && !gdn::simt_forced();
        if (ws_bytes >= (tc ? gdn::tc_ws_bytes(p.T, p.Hv) : gdn::chunked_ws_bytes(p.T, p.Hv, p.dk, p.dv))) {
            gdn::launch_chunked(p, static_cast<float*>(ws), s);
            return;
        }
    }
    launch_gdn_recurrent(p, s);
}
}  // namespace

void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                      const Tensor& A_log, const Tensor& dt_bias, Tensor& state, Tensor& out, void* ws,
                      size_t ws_bytes, cudaStream_t s) {
    if (q.ndim != 3 || k.ndim != 3 || v.ndim != 3) throw Error("cuda gated_delta_rule: q, k, v must be 3-D");
    const int64_t T = q.dim(0), Hk = q.dim(1), dk = q.dim(2), Hv = v.dim(1), dv = v.dim(2);
    if (k.numel() != q.numel() || v.dim(0) != T || k.dtype != q.dtype || v.dtype != q.dtype)
        throw Error("cuda gated_delta_rule: q, k [T, Hk, dk], v [T, Hv, dv] of one dtype");
    GdnParams p = make_params(T, Hk, dk, Hv, dv, a, b, A_log, dt_bias, state, out, q.dtype, 0);
    p.q = q.data;
    p.k = k.data;
    p.v = v.data;
    p.qs = p.ks = Hk * dk;
    p.vs = Hv * dv;
    run(p, ws, ws_bytes, s);
}

void gated_delta_rule_qkv(const Tensor& qkv, int64_t Hk, int64_t dk, const Tensor& a, const Tensor& b,
                          const Tensor& A_log, const Tensor& dt_bias, Tensor& state, Tensor& out, void* ws,
                          size_t ws_bytes, cudaStream_t s, int64_t qkv_stride, int64_t ab_stride) {
    if (state.ndim != 3 || Hk <= 0 || state.dim(1) != dk) throw Error("cuda gated_delta_rule_qkv: state must be [Hv, dk, dv]");
    const int64_t T = qkv.rows(), C = qkv.cols(), Hv = state.dim(0), dv = state.dim(2), key = Hk * dk;
    if (C != 2 * key + Hv * dv) throw Error("cuda gated_delta_rule_qkv: qkv is not [T, 2 Hk dk + Hv dv]");
    if (qkv_stride != 0 && qkv_stride < C) throw Error("cuda gated_delta_rule_qkv: qkv row stride below its width");
    GdnParams p = make_params(T, Hk, dk, Hv, dv, a, b, A_log, dt_bias, state, out, qkv.dtype, ab_stride);
    const size_t es = dtype_size(qkv.dtype);
    p.q = qkv.data;
    p.k = static_cast<const char*>(qkv.data) + key * es;
    p.v = static_cast<const char*>(qkv.data) + 2 * key * es;
    p.qs = p.ks = p.vs = qkv_stride ? qkv_stride : C;
    run(p, ws, ws_bytes, s);
}

}  // namespace grimoire::cuda
