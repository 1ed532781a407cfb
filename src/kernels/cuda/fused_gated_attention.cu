// One decode token (T = 1) of Backend::gated_attention_core in three kernels instead of eleven: a prep kernel
// does the [query | gate] split, the (1+w) q/k RMSNorms, RoPE and the KV-cache append; the split-K decode
// kernels of attention_decode.cu follow, their merge applying sigmoid(gate). The current position is read
// from positions[0] on the device (no per-step length slot), so a captured graph is right at every length.
#include "kernels/cuda/attention_impl.h"
#include "kernels/cuda/fused_util.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

namespace {
constexpr int kMaxD = 256;

struct PrepArgs {
    const void* qg;  // [Hq, 2D] per head [query | gate]
    const void* k;   // [Hkv, D]
    const void* v;   // [Hkv, D]
    const void* qw;  // [D] q_norm
    const void* kw;  // [D] k_norm
    void* q;         // [Hq, D] out: normalised, rotated query
    void* kc;        // [max_ctx, Hkv, D]
    void* vc;        // [max_ctx, Hkv, D]
    const int32_t* positions;  // [1]
    int qgdt, kdt, vdt, qwdt, kwdt, qdt, cdt;
    int64_t Hq, Hkv, D;
    float eps, attn_factor;
    int half, neox;
    float inv_freq[kMaxD / 2];
};
}  // namespace

// Block b < Hq: query head b; block Hq + j: KV head j. blockDim = D. The normalised value is rounded to the
// dtype the unfused rmsnorm would have stored before RoPE reads it back.
static __global__ void gated_attn_prep_kernel(PrepArgs a) {
    __shared__ float xs[kMaxD];
    __shared__ float red[32];
    const int i = threadIdx.x;
    const int64_t D = a.D;
    const bool is_q = blockIdx.x < a.Hq;
    const int64_t h = is_q ? blockIdx.x : blockIdx.x - a.Hq;
    const int pos = a.positions[0];  // loaded with x, not after the barrier below
    const float x = is_q ? ld(a.qg, a.qgdt, h * 2 * D + i) : ld(a.k, a.kdt, h * D + i);
    const float r = rsqrtf(block_sum(x * x, red) / static_cast<float>(D) + a.eps);
    const float w = is_q ? ld(a.qw, a.qwdt, i) : ld(a.kw, a.kwdt, i);
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
        st(a.q, a.qdt, h * D + i, y);
    } else {
        const int64_t row = static_cast<int64_t>(pos) * a.Hkv * D + h * D + i;
        st(a.kc, a.cdt, row, y);
        st(a.vc, a.cdt, row, ld(a.v, a.vdt, h * D + i));
    }
}

void gated_attention_decode(const Tensor& qg, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                            const Tensor& k_norm, float eps, const Tensor& positions, const RopeParams& rope,
                            Tensor& k_cache, Tensor& v_cache, float scale, Tensor& q_ws, void* ws, size_t ws_bytes,
                            Tensor& out, cudaStream_t s) {
    const char* op = "gated_attention_core";
    if (k_cache.ndim != 3 || v_cache.numel() != k_cache.numel() || v_cache.dtype != k_cache.dtype)
        throw Error("cuda gated_attention_core: caches must be [max_ctx, Hkv, D] of one dtype");
    const int64_t Hkv = k_cache.dim(1), D = k_cache.dim(2);
    if (D == 0 || D % 32 != 0 || D > kMaxD) throw Error("cuda gated_attention_core: head_dim must be 32..256, x32");
    if (qg.rows() != 1 || qg.numel() % (2 * D) != 0) throw Error("cuda gated_attention_core: decode takes qg [1, Hq * 2D]");
    const int64_t Hq = qg.numel() / (2 * D);
    if (Hkv == 0 || Hq % Hkv != 0 || Hq / Hkv > 8 || k.numel() != Hkv * D || v.numel() != Hkv * D ||
        out.numel() != Hq * D || q_ws.numel() != Hq * D || q_norm.numel() != D || k_norm.numel() != D)
        throw Error("cuda gated_attention_core: qg [1, Hq * 2D], k/v [1, Hkv * D], norms [D], out [1, Hq * D] "
                    "with Hq a multiple (<= 8) of Hkv");
    if (positions.dtype != DType::I32 || positions.numel() != 1)
        throw Error("cuda gated_attention_core: positions must be [1] I32");
    const int half = rope.rot_dim / 2;
    if (rope.rot_dim % 2 != 0 || rope.rot_dim > D || static_cast<int>(rope.inv_freq.size()) != half)
        throw Error("cuda gated_attention_core: rot_dim " + std::to_string(rope.rot_dim) + " does not fit head_dim " +
                    std::to_string(D));
    if (ws_bytes < attention_ws_bytes(Hq, D)) throw Error("cuda gated_attention_core: workspace too small");
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
    a.eps = eps;
    a.attn_factor = rope.attn_factor;
    a.half = half;
    a.neox = rope.neox ? 1 : 0;
    for (int f = 0; f < half; ++f) a.inv_freq[f] = rope.inv_freq[static_cast<size_t>(f)];
    gated_attn_prep_kernel<<<static_cast<unsigned>(Hq + Hkv), static_cast<unsigned>(D), 0, s>>>(a);
    check_launch("gated_attention_core prep");
    // The query's gate half starts D elements into qg's head rows of 2D.
    const void* gate = static_cast<const char*>(qg.data) + D * static_cast<int64_t>(dtype_size(qg.dtype));
    attn::Geometry g{1, Hq, Hkv, D, k_cache.dim(0)};
    attn::launch_decode(q_ws.data, a.qdt, k_cache.data, v_cache.data, cdt, g, 0, positions.ptr<int32_t>(), scale,
                        static_cast<float*>(ws), out.data, dt_code(out.dtype, op, "out"), s, gate, a.qgdt, 2 * D);
}

}  // namespace grimoire::cuda
