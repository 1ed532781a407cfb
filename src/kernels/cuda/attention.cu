// Causal GQA attention with a KV cache (Backend::attention): appends k, v at rows n_past.. of the cache, then
// runs split-K flash-decoding for one query token or the flash prefill kernel for several.
#include "kernels/cuda/attention_impl.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

// Writes k, v [T, Hkv, D] into the caches at rows n_past.. (n_past read from the device when given).
static __global__ void kv_append_kernel(const void* __restrict__ k, int kdt, const void* __restrict__ v, int vdt,
                                        void* kc, void* vc, int cdt, int64_t n, int64_t row, int64_t n_past,
                                        const int* n_past_dev) {
    const int64_t base = (n_past_dev ? *n_past_dev : n_past) * row;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        st(kc, cdt, base + i, ld(k, kdt, i));
        st(vc, cdt, base + i, ld(v, vdt, i));
    }
}

static void launch_kv_append(const void* k, int kdt, const void* v, int vdt, void* kc, void* vc, int cdt, int64_t n,
                             int64_t row, int64_t n_past, const int* n_past_dev, cudaStream_t s) {
    kv_append_kernel<<<grid_for(n, 256), 256, 0, s>>>(k, kdt, v, vdt, kc, vc, cdt, n, row, n_past, n_past_dev);
    check_launch("attention kv append");
}

size_t attention_ws_bytes(int64_t Hq, int64_t D) {
    return static_cast<size_t>(Hq) * attn::kMaxSplits * static_cast<size_t>(D + 2) * sizeof(float);
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
               const AttnArgs& a, Tensor& out, cudaStream_t s) {
    // Like the CPU oracle: q/out may be [T, Hq, D] or [T, Hq*D], k/v [T, Hkv, D] or [T, Hkv*D]; Hkv and D
    // come from the cache [max_ctx, Hkv, D].
    if (k_cache.ndim != 3 || v_cache.numel() != k_cache.numel() || v_cache.dtype != k_cache.dtype)
        throw Error("cuda attention: caches must be [max_ctx, Hkv, D] of one dtype");
    const int64_t T = q.ndim ? q.dim(0) : 0, Hkv = k_cache.dim(1), D = k_cache.dim(2);
    if (T == 0) return;
    if (D == 0 || q.numel() % (T * D) != 0) throw Error("cuda attention: q does not match the cache head_dim");
    attn::Geometry g{T, q.numel() / (T * D), Hkv, D, k_cache.dim(0)};
    if (g.Hkv == 0 || g.Hq % g.Hkv != 0 || k.numel() != T * Hkv * D || v.numel() != k.numel() ||
        out.numel() != q.numel())
        throw Error("cuda attention: q [T, Hq, D], k/v [T, Hkv, D], caches [max_ctx, Hkv, D], out [T, Hq, D]");
    if (g.D % 32 != 0 || g.D > 256) throw Error("cuda attention: head_dim " + std::to_string(g.D) + " unsupported");
    if (g.Hq / g.Hkv > 8) throw Error("cuda attention: more than 8 query heads per KV head unsupported");
    if (!a.n_past_dev && (a.n_past < 0 || a.n_past + g.T > g.max_ctx))
        throw Error("cuda attention: KV cache overflow (n_past " + std::to_string(a.n_past) + " + T " +
                    std::to_string(g.T) + " > " + std::to_string(g.max_ctx) + ")");
    const char* op = "attention";
    const int cdt = dt_code(k_cache.dtype, op, "k_cache");
    launch_kv_append(k.data, dt_code(k.dtype, op, "k"), v.data, dt_code(v.dtype, op, "v"), k_cache.data,
                     v_cache.data, cdt, k.numel(), g.Hkv * g.D, a.n_past, a.n_past_dev, s);
    if (cdt == kF16) throw Error("cuda attention: F16 caches unsupported");
    if (g.T == 1) {
        if (a.ws_bytes < attention_ws_bytes(g.Hq, g.D)) throw Error("cuda attention: workspace too small");
        attn::launch_decode(q.data, dt_code(q.dtype, op, "q"), k_cache.data, v_cache.data, cdt, g, a.n_past,
                            a.n_past_dev, a.scale, static_cast<float*>(a.ws), out.data,
                            dt_code(out.dtype, op, "out"), s);
    } else if (!(cdt == kBF16 && attn::launch_prefill_tc(q.data, dt_code(q.dtype, op, "q"), k_cache.data,
                                                         v_cache.data, g, a.n_past, a.n_past_dev, a.scale, out.data,
                                                         dt_code(out.dtype, op, "out"), s))) {
        attn::launch_prefill(q.data, dt_code(q.dtype, op, "q"), k_cache.data, v_cache.data, cdt, g, a.n_past,
                             a.n_past_dev, a.scale, out.data, dt_code(out.dtype, op, "out"), s);
    }
}

}  // namespace grimoire::cuda
