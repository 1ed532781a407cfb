// Backend::gated_attention_core in a few kernels instead of the unfused sequence's nine to eleven. A prep kernel
// does the [query | gate] split, the (1+w) q/k RMSNorms, RoPE and the KV-cache append for every token. Decode
// (T <= 8 tokens: one, or a verify step) then runs the split-K decode kernels of attention_decode.cu, token t
// over the cache rows up to positions[t], their merge applying sigmoid(gate); the positions are read on the
// device (no per-step length slot), so a captured graph is right at every length. (A 4-token verify through
// the flash prefill kernel had 24 blocks walking the whole cache: 36 us per 27B layer at length 512.) A prompt
// runs the flash prefill kernel over the cache and one kernel multiplying by sigmoid of the gate half read in
// place from qg (no copies of q or the gate).
#include "kernels/cuda/attention_impl.h"
#include "kernels/cuda/fused_util.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

namespace {
constexpr int kMaxD = 256;

struct PrepArgs {
    const void* qg;  // [T, Hq, 2D] per head [query | gate]
    const void* k;   // [T, Hkv, D]
    const void* v;   // [T, Hkv, D]
    const void* qw;  // [D] q_norm
    const void* kw;  // [D] k_norm
    void* q;         // [T, Hq, D] out: normalised, rotated query
    void* kc;        // [max_ctx, Hkv, D]
    void* vc;        // [max_ctx, Hkv, D]
    const int32_t* positions;  // [T]: token t goes to cache row positions[t]
    int qgdt, kdt, vdt, qwdt, kwdt, qdt, cdt;
    int64_t Hq, Hkv, D;
    int64_t qs, kvs;  // elements between tokens' qg rows and k (v) rows: Hq 2D and Hkv D, or wider (read in place)
    float eps, attn_factor;
    int half, neox;
    float inv_freq[kMaxD / 2];
    L2Prefetch pf;  // decode: the o_proj weight, asked of L2 after the wait (l2_prefetch.h)
};
}  // namespace

// Block (b, t): token t; b < Hq: query head b, b = Hq + j: KV head j. blockDim = D. The normalised value is
// rounded to the dtype the unfused rmsnorm would have stored before RoPE reads it back.
static __global__ void gated_attn_prep_kernel(PrepArgs a) {
    __shared__ float xs[kMaxD];
    __shared__ float red[32];
    const int i = threadIdx.x;
    const int64_t D = a.D, t = blockIdx.y;
    const bool is_q = blockIdx.x < a.Hq;
    const int64_t h = is_q ? blockIdx.x : blockIdx.x - a.Hq;
    // The position (copied in at the step's start) and the norm weight before the programmatic-launch wait:
    // only x comes from the predecessor.
    const int pos = a.positions[t];
    const float w = is_q ? ld(a.qw, a.qwdt, i) : ld(a.kw, a.kwdt, i);
    pdl_enter();  // launched through launch_pdl (common.cuh)
    l2_prefetch_share(a.pf, static_cast<int>(blockIdx.y * gridDim.x + blockIdx.x),
                      static_cast<int>(gridDim.x * gridDim.y));
    const int64_t kv_off = t * a.kvs + h * D;
    const float x = is_q ? ld(a.qg, a.qgdt, t * a.qs + h * 2 * D + i) : ld(a.k, a.kdt, kv_off + i);
    const float r = rsqrtf(block_sum(x * x, red) / static_cast<float>(D) + a.eps);
    const int sdt = is_q ? a.qdt : a.cdt;
    xs[i] = round_as(sdt, x * r * (1.0f + w));
    __syncthreads();
    float y = xs[i];
    if (i < 2 * a.half) {
        // NeoX pairs (f, f + half); GPT-J pairs (2f, 2f + 1). The angle as in rope.cu.
        const bool first = a.neox ? i < a.half : (i % 2) == 0;
        const int f = a.neox ? (first ? i : i - a.half) : i / 2;
        const int partner = a.neox ? (first ? i + a.half : i - a.half) : (first ? i + 1 : i - 1);
        float sn, cs;
        sincosf(static_cast<float>(pos) * a.inv_freq[f], &sn, &cs);
        cs *= a.attn_factor;
        sn *= a.attn_factor;
        const float u = first ? y : xs[partner], v = first ? xs[partner] : y;
        y = first ? u * cs - v * sn : v * cs + u * sn;
    }
    if (is_q) {
        st(a.q, a.qdt, (t * a.Hq + h) * D + i, y);
    } else {
        const int64_t row = static_cast<int64_t>(pos) * a.Hkv * D + h * D + i;
        st(a.kc, a.cdt, row, y);
        st(a.vc, a.cdt, row, ld(a.v, a.vdt, kv_off + i));
    }
}

// Prompts: the same per (token, head) row with one warp per row (8 rows per block), a lane holding elements
// lane, lane + 32, ... (E = D / 32 of them), the sum of squares by shuffles. The block-per-row kernel above
// ran 14336 blocks of 256 threads with two barriers each for a 512-token 27B prompt. NeoX pairs (i, i + half)
// sit in one lane when half is a multiple of 32; GPT-J pairs (2f, 2f + 1) are neighbouring lanes.
template <int E>
static __global__ void __launch_bounds__(256) gated_attn_prep_warp_kernel(PrepArgs a, int64_t rows) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    constexpr int D = 32 * E;
    const int lane = threadIdx.x & 31;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int64_t HB = a.Hq + a.Hkv, t = row / HB, b = row % HB;
    const bool is_q = b < a.Hq;
    const int64_t h = is_q ? b : b - a.Hq;
    const int pos = a.positions[t];
    const int64_t kv_off = t * a.kvs + h * D;
    const void* src = is_q ? a.qg : a.k;
    const int64_t src_off = is_q ? t * a.qs + h * 2 * D : kv_off;
    const int sdt = is_q ? a.qgdt : a.kdt;
    float x[E];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < E; ++j) {
        x[j] = ld(src, sdt, src_off + j * 32 + lane);
        ss += x[j] * x[j];
    }
    const float r = rsqrtf(warp_sum(ss) / static_cast<float>(D) + a.eps);
    const void* w = is_q ? a.qw : a.kw;
    const int wdt = is_q ? a.qwdt : a.kwdt, odt = is_q ? a.qdt : a.cdt;
#pragma unroll
    for (int j = 0; j < E; ++j) x[j] = round_as(odt, x[j] * r * (1.0f + ld(w, wdt, j * 32 + lane)));
    float y[E];
#pragma unroll
    for (int j = 0; j < E; ++j) {
        y[j] = x[j];
        const int i = j * 32 + lane;
        // The GPT-J partner is lane ^ 1 of the same j: every lane shuffles (the pairs never straddle rot_dim).
        const float nb = a.neox ? 0.0f : __shfl_xor_sync(0xffffffffu, x[j], 1);
        if (i >= 2 * a.half) continue;
        const int hj = a.half / 32;
        const bool first = a.neox ? j < hj : (i % 2) == 0;
        const int f = a.neox ? (first ? i : i - a.half) : i / 2;
        float partner = nb;
        if (a.neox) {
#pragma unroll
            for (int m = 0; m < E; ++m)  // x[j +- hj] without dynamic register indexing
                if (m == (first ? j + hj : j - hj)) partner = x[m];
        }
        float sn, cs;
        sincosf(static_cast<float>(pos) * a.inv_freq[f], &sn, &cs);
        cs *= a.attn_factor;
        sn *= a.attn_factor;
        y[j] = first ? x[j] * cs - partner * sn : x[j] * cs + partner * sn;
    }
#pragma unroll
    for (int j = 0; j < E; ++j) {
        const int i = j * 32 + lane;
        if (is_q) {
            st(a.q, a.qdt, (t * a.Hq + h) * D + i, y[j]);
        } else {
            const int64_t crow = static_cast<int64_t>(pos) * a.Hkv * D + h * D + i;
            st(a.kc, a.cdt, crow, y[j]);
            st(a.vc, a.cdt, crow, ld(a.v, a.vdt, kv_off + i));
        }
    }
}

// out [R = T Hq, D] *= sigmoid(gate), the gate of row r = t Hq + h at qg + t qs + h 2D + D (the gate half of
// qg's head rows), after out was rounded to its dtype by the attention kernel, as the unfused mul_sigmoid does.
// BF16 with D and qs multiples of 8: 16-byte vectors (dvec, qsvec in vectors).
static __global__ void gate_rows_vec_kernel(uint4* out, const uint4* __restrict__ qg, int64_t n, int64_t dvec,
                                            int64_t Hq, int64_t qsvec) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / dvec, c = i % dvec;
        uint4 o = out[i];
        const uint4 g = qg[(r / Hq) * qsvec + (r % Hq) * 2 * dvec + dvec + c];
        __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
        const __nv_bfloat162* gh = reinterpret_cast<const __nv_bfloat162*>(&g);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 of = __bfloat1622float2(oh[e]), gf = __bfloat1622float2(gh[e]);
            oh[e] = __floats2bfloat162_rn(of.x * sigmoidf_(gf.x), of.y * sigmoidf_(gf.y));
        }
        out[i] = o;
    }
}
static __global__ void gate_rows_kernel(void* out, int odt, const void* __restrict__ qg, int gdt, int64_t n,
                                        int64_t D, int64_t Hq, int64_t qs) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / D, c = i % D;
        st(out, odt, i, ld(out, odt, i) * sigmoidf_(ld(qg, gdt, (r / Hq) * qs + (r % Hq) * 2 * D + D + c)));
    }
}

namespace {
// Checks shared by decode and prefill; fills the prep kernel's arguments (q = the normalised query's buffer).
PrepArgs prep_args(const Tensor& qg, const Tensor& k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm,
                   float eps, const Tensor& positions, const RopeParams& rope, Tensor& k_cache, Tensor& v_cache,
                   Tensor& q_ws, const Tensor& out) {
    const char* op = "gated_attention_core";
    if (k_cache.ndim != 3 || v_cache.numel() != k_cache.numel() || v_cache.dtype != k_cache.dtype)
        throw Error("cuda gated_attention_core: caches must be [max_ctx, Hkv, D] of one dtype");
    const int64_t Hkv = k_cache.dim(1), D = k_cache.dim(2), T = qg.rows();
    if (D == 0 || D % 32 != 0 || D > kMaxD) throw Error("cuda gated_attention_core: head_dim must be 32..256, x32");
    if (T == 0 || qg.numel() % (T * 2 * D) != 0) throw Error("cuda gated_attention_core: qg must be [T, Hq * 2D]");
    const int64_t Hq = qg.numel() / (T * 2 * D);
    if (Hkv == 0 || Hq % Hkv != 0 || Hq / Hkv > 8 || k.numel() != T * Hkv * D || v.numel() != T * Hkv * D ||
        out.numel() != T * Hq * D || q_ws.numel() != T * Hq * D || q_norm.numel() != D || k_norm.numel() != D)
        throw Error("cuda gated_attention_core: qg [T, Hq * 2D], k/v [T, Hkv * D], norms [D], out [T, Hq * D] "
                    "with Hq a multiple (<= 8) of Hkv");
    if (T > 65535) throw Error("cuda gated_attention_core: more than 65535 tokens in one call");
    if (positions.dtype != DType::I32 || positions.numel() != T)
        throw Error("cuda gated_attention_core: positions must be [T] I32");
    const int half = rope.rot_dim / 2;
    if (rope.rot_dim % 2 != 0 || rope.rot_dim > D || static_cast<int>(rope.inv_freq.size()) != half)
        throw Error("cuda gated_attention_core: rot_dim " + std::to_string(rope.rot_dim) + " does not fit head_dim " +
                    std::to_string(D));
    const int cdt = dt_code(k_cache.dtype, op, "k_cache");
    if (cdt == kF16) throw Error("cuda gated_attention_core: F16 caches unsupported");
    PrepArgs a{};
    a.qg = qg.data;
    a.k = k.data;
    a.v = v.data;
    a.qw = q_norm.data;
    a.kw = k_norm.data;
    a.q = q_ws.data;
    a.kc = k_cache.data;
    a.vc = v_cache.data;
    a.positions = positions.ptr<int32_t>();
    a.qgdt = dt_code(qg.dtype, op, "qg");
    a.kdt = dt_code(k.dtype, op, "k");
    a.vdt = dt_code(v.dtype, op, "v");
    a.qwdt = dt_code(q_norm.dtype, op, "q_norm");
    a.kwdt = dt_code(k_norm.dtype, op, "k_norm");
    a.qdt = dt_code(q_ws.dtype, op, "q");
    a.cdt = cdt;
    a.Hq = Hq;
    a.Hkv = Hkv;
    a.D = D;
    a.qs = Hq * 2 * D;
    a.kvs = Hkv * D;
    a.eps = eps;
    a.attn_factor = rope.attn_factor;
    a.half = half;
    a.neox = rope.neox ? 1 : 0;
    for (int f = 0; f < half; ++f) a.inv_freq[f] = rope.inv_freq[static_cast<size_t>(f)];
    return a;
}

void launch_prep(const PrepArgs& a, int64_t T, cudaStream_t s) {
    launch_pdl(gated_attn_prep_kernel, dim3(static_cast<unsigned>(a.Hq + a.Hkv), static_cast<unsigned>(T)),
               dim3(static_cast<unsigned>(a.D)), 0, s, a);
    check_launch("gated_attention_core prep");
}
}  // namespace

void gated_attention_decode(const Tensor& qg,
                            const Tensor& k,
                            const Tensor& v,
                            const Tensor& q_norm,
                            const Tensor& k_norm,
                            float eps,
                            const Tensor& positions,
                            const RopeParams& rope,
                            Tensor& k_cache,
                            Tensor& v_cache,
                            float scale,
                            Tensor& q_ws,
                            void* ws,
                            size_t ws_bytes,
                            Tensor& out,
                            cudaStream_t s,
                            const L2Prefetch* pf,
                            bool ahead) {
    const int64_t T = qg.rows();
    if (T < 1 || T > attn::kMaxDecodeTokens) throw Error("cuda gated_attention_core: decode takes 1..8 tokens");
    PrepArgs a = prep_args(qg, k, v, q_norm, k_norm, eps, positions, rope, k_cache, v_cache, q_ws, out);
    if (pf) a.pf = *pf;
    if (ws_bytes < attention_ws_bytes(a.Hq, a.D)) throw Error("cuda gated_attention_core: workspace too small");
    launch_prep(a, T, s);
    // The query's gate half starts D elements into qg's head rows of 2D.
    const void* gate = static_cast<const char*>(qg.data) + a.D * static_cast<int64_t>(dtype_size(qg.dtype));
    attn::Geometry g{T, a.Hq, a.Hkv, a.D, k_cache.dim(0)};
    attn::launch_decode(q_ws.data, a.qdt, k_cache.data, v_cache.data, a.cdt, g, 0, positions.ptr<int32_t>(),
                        scale, static_cast<float*>(ws), out.data,
                        dt_code(out.dtype, "gated_attention_core", "out"), s, gate, a.qgdt, 2 * a.D, ahead);
}

void gated_attention_prefill(const Tensor& qg, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                             const Tensor& k_norm, float eps, const Tensor& positions, const RopeParams& rope,
                             Tensor& k_cache, Tensor& v_cache, int64_t n_past, const int* n_past_dev, float scale,
                             Tensor& q_ws, Tensor& out, cudaStream_t s, int64_t qg_stride, int64_t kv_stride) {
    PrepArgs a = prep_args(qg, k, v, q_norm, k_norm, eps, positions, rope, k_cache, v_cache, q_ws, out);
    const int64_t T = qg.rows();
    if ((qg_stride && qg_stride < a.qs) || (kv_stride && kv_stride < a.kvs))
        throw Error("cuda gated_attention_core: qg / k / v row strides below their widths");
    if (qg_stride) a.qs = qg_stride;
    if (kv_stride) a.kvs = kv_stride;
    if (!n_past_dev && (n_past < 0 || n_past + T > k_cache.dim(0)))
        throw Error("cuda gated_attention_core: KV cache overflow");
    const int64_t rows = T * (a.Hq + a.Hkv);
    const unsigned wgrid = static_cast<unsigned>((rows + 7) / 8);
    const bool pairs_ok = a.neox ? a.half % 32 == 0 : true;
    if (pairs_ok && a.D == 256)
        launch_pdl(gated_attn_prep_warp_kernel<8>, dim3(wgrid), dim3(256), 0, s, a, rows);
    else if (pairs_ok && a.D == 128)
        launch_pdl(gated_attn_prep_warp_kernel<4>, dim3(wgrid), dim3(256), 0, s, a, rows);
    else if (pairs_ok && a.D == 64)
        launch_pdl(gated_attn_prep_warp_kernel<2>, dim3(wgrid), dim3(256), 0, s, a, rows);
    else launch_prep(a, T, s);
    check_launch("gated_attention_core prep");
    const int odt = dt_code(out.dtype, "gated_attention_core", "out");
    attn::Geometry g{T, a.Hq, a.Hkv, a.D, k_cache.dim(0)};
    if (!(a.cdt == kBF16 && attn::launch_prefill_tc(q_ws.data, a.qdt, k_cache.data, v_cache.data, g, n_past,
                                                    n_past_dev, scale, out.data, odt, s)))
        attn::launch_prefill(q_ws.data, a.qdt, k_cache.data, v_cache.data, a.cdt, g, n_past, n_past_dev, scale,
                             out.data, odt, s);
    const int64_t n = T * a.Hq * a.D;
    const bool vec = odt == kBF16 && a.qgdt == kBF16 && a.D % 8 == 0 && a.qs % 8 == 0 &&
                     ((reinterpret_cast<uintptr_t>(out.data) | reinterpret_cast<uintptr_t>(qg.data)) & 15) == 0;
    if (vec)
        launch_pdl(gate_rows_vec_kernel, dim3(grid_for(n / 8, 256)), dim3(256), 0, s,
                   static_cast<uint4*>(out.data), static_cast<const uint4*>(qg.data), n / 8, a.D / 8, a.Hq,
                   a.qs / 8);
    else
        launch_pdl(gate_rows_kernel, dim3(grid_for(n, 256)), dim3(256), 0, s, out.data, odt, qg.data, a.qgdt,
                   n, a.D, a.Hq, a.qs);
    check_launch("gated_attention_core gate");
}

}  // namespace grimoire::cuda
