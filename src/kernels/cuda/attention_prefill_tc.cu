// Flash attention for prefill on tensor cores (WMMA bf16 16x16x16, fp32 accumulation), causal GQA, BF16 caches,
// head_dim 32..256 (multiple of 32). Block = (64-query tile, query head), 4 warps of 16 queries.
//
// Per 64-row key tile staged in shared memory: S = Q K^T on tensor cores into a per-warp fp32 tile; the online
// softmax runs on it in fp32 (two lanes per query row) and writes P as bf16; the running output O lives in
// shared memory in fp32 (WMMA accumulator layouts are opaque, so the per-row rescale by exp(m_old - m_new) is
// done there) and O += P V is another tensor-core product. Compared to the fp32 SIMT kernel this moves the
// two D-long dot products per (query, key) pair onto the tensor cores.
#include <mma.h>

#include "kernels/cuda/attention_impl.h"
#include "kernels/cuda/common.cuh"

namespace grimoire::cuda::attn {

namespace {
namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;
constexpr int kBQ = 64, kBK = 64, kWarps = 4, kRows = kBQ / kWarps;  // 16 query rows per warp
constexpr int kSld = kBK + 4;  // fp32 S tile row stride
constexpr int kPld = kBK + 8;  // bf16 P tile row stride

struct TcParams {
    const void* q;       // [T, Hq, D]
    const bf16* k_cache;  // [max_ctx, Hkv, D]
    const bf16* v_cache;
    void* out;           // [T, Hq, D]
    int q_dt, o_dt, G;
    int64_t T, Hq, Hkv, n_past;
    const int* n_past_dev;
    float scale;
};

constexpr size_t align128(size_t n) { return (n + 127) / 128 * 128; }
template <int D>
struct Smem {
    static constexpr int kld = D + 8;  // bf16 K/V row stride (keeps rows 32-byte aligned, spreads banks)
    static constexpr int old = D + 4;  // fp32 O row stride
    static constexpr size_t q = 0;
    static constexpr size_t k = align128(q + sizeof(bf16) * kBQ * D);
    static constexpr size_t v = align128(k + sizeof(bf16) * kBK * kld);
    static constexpr size_t s = align128(v + sizeof(bf16) * kBK * kld);
    static constexpr size_t p = align128(s + sizeof(float) * kWarps * kRows * kSld);
    static constexpr size_t o = align128(p + sizeof(bf16) * kWarps * kRows * kPld);
    static constexpr size_t total = align128(o + sizeof(float) * kWarps * kRows * old);
};
}  // namespace

template <int D>
static __global__ void __launch_bounds__(32 * kWarps) prefill_tc_kernel(TcParams p) {
    using L = Smem<D>;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16* Qs = reinterpret_cast<bf16*>(smem + L::q);
    bf16* Ks = reinterpret_cast<bf16*>(smem + L::k);
    bf16* Vs = reinterpret_cast<bf16*>(smem + L::v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* Ss = reinterpret_cast<float*>(smem + L::s) + warp * kRows * kSld;
    bf16* Ps = reinterpret_cast<bf16*>(smem + L::p) + warp * kRows * kPld;
    float* Os = reinterpret_cast<float*>(smem + L::o) + warp * kRows * L::old;

    const int64_t h = blockIdx.y, kvh = h / p.G, t0 = static_cast<int64_t>(blockIdx.x) * kBQ;
    const int64_t n_past = p.n_past_dev ? *p.n_past_dev : p.n_past;
    const int64_t t_last = (t0 + kBQ < p.T ? t0 + kBQ : p.T) - 1;
    const int64_t kend = n_past + t_last + 1;
    const int64_t row = p.Hkv * D;

    for (int i = threadIdx.x; i < kBQ * D; i += blockDim.x) {
        const int64_t t = t0 + i / D;
        Qs[i] = __float2bfloat16(t < p.T ? ld(p.q, p.q_dt, (t * p.Hq + h) * D + i % D) : 0.0f);
    }
    for (int i = lane; i < kRows * D; i += 32) Os[(i / D) * L::old + i % D] = 0.0f;
    // Two lanes per query row: lane 2r and 2r+1 own row r, columns [32 * (lane & 1), +32) of each S tile.
    const int my_row = lane >> 1, half = lane & 1;
    const int64_t my_t = t0 + warp * kRows + my_row;
    float m = -INFINITY, l = 0.0f;

    for (int64_t kt = 0; kt < kend; kt += kBK) {
        __syncthreads();  // the previous tile's K/V are no longer read
        constexpr int kVec = D / 8;  // 16-byte vectors per row
        for (int i = threadIdx.x; i < kBK * kVec; i += blockDim.x) {
            const int jj = i / kVec, c = (i % kVec) * 8;
            const int64_t j = kt + jj;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
            if (j < kend) {
                kv = *reinterpret_cast<const uint4*>(p.k_cache + j * row + kvh * D + c);
                vv = *reinterpret_cast<const uint4*>(p.v_cache + j * row + kvh * D + c);
            }
            *reinterpret_cast<uint4*>(Ks + jj * L::kld + c) = kv;
            *reinterpret_cast<uint4*>(Vs + jj * L::kld + c) = vv;
        }
        __syncthreads();

        // S [16, 64] = Q_w [16, D] K^T [D, 64]
        for (int nt = 0; nt < kBK / 16; ++nt) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int kk = 0; kk < D / 16; ++kk) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
                wmma::load_matrix_sync(a, Qs + (warp * kRows) * D + kk * 16, D);
                wmma::load_matrix_sync(b, Ks + (nt * 16) * L::kld + kk * 16, L::kld);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(Ss + nt * 16, acc, kSld, wmma::mem_row_major);
        }
        __syncwarp();

        // Online softmax on this lane's half row; P to bf16; rescale this lane's half of O.
        float sv[32];
        float mt = -INFINITY;
#pragma unroll
        for (int c = 0; c < 32; ++c) {
            const int64_t j = kt + half * 32 + c;
            const bool vis = j < kend && j <= n_past + my_t;
            sv[c] = vis ? Ss[my_row * kSld + half * 32 + c] * p.scale : -INFINITY;
            mt = fmaxf(mt, sv[c]);
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        const float mn = fmaxf(m, mt);
        const float corr = mn == -INFINITY ? 1.0f : __expf(m - mn);
        float ls = 0.0f;
#pragma unroll
        for (int c = 0; c < 32; ++c) {
            const float e = sv[c] == -INFINITY ? 0.0f : __expf(sv[c] - mn);
            ls += e;
            Ps[my_row * kPld + half * 32 + c] = __float2bfloat16(e);
        }
        ls += __shfl_xor_sync(0xffffffffu, ls, 1);
        l = l * corr + ls;
        m = mn;
        for (int d = half * (D / 2); d < (half + 1) * (D / 2); ++d) Os[my_row * L::old + d] *= corr;
        __syncwarp();

        // O [16, D] += P [16, 64] V [64, D]
        for (int dt = 0; dt < D / 16; ++dt) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, Os + dt * 16, L::old, wmma::mem_row_major);
            for (int kk = 0; kk < kBK / 16; ++kk) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
                wmma::load_matrix_sync(a, Ps + kk * 16, kPld);
                wmma::load_matrix_sync(b, Vs + (kk * 16) * L::kld + dt * 16, L::kld);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(Os + dt * 16, acc, L::old, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (my_t < p.T) {
        const float inv = 1.0f / l;
        for (int d = half * (D / 2); d < (half + 1) * (D / 2); ++d)
            st(p.out, p.o_dt, (my_t * p.Hq + h) * D + d, Os[my_row * L::old + d] * inv);
    }
}

template <int D>
static bool launch_tc_d(const TcParams& p, cudaStream_t s) {
    static int state = 0;  // 0 unknown, 1 ok, -1 the device cannot give this much shared memory
    if (state == 0)
        state = cudaFuncSetAttribute(prefill_tc_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(Smem<D>::total)) == cudaSuccess ? 1 : -1;
    if (state < 0) {
        cudaGetLastError();
        return false;
    }
    dim3 grid(static_cast<unsigned>((p.T + kBQ - 1) / kBQ), static_cast<unsigned>(p.Hq));
    prefill_tc_kernel<D><<<grid, 32 * kWarps, Smem<D>::total, s>>>(p);
    check_launch("attention prefill (tensor cores)");
    return true;
}

bool launch_prefill_tc(const void* q, int q_dt, const void* k_cache, const void* v_cache, const Geometry& g,
                       int64_t n_past, const int* n_past_dev, float scale, void* out, int o_dt, cudaStream_t s) {
    TcParams p{q, static_cast<const bf16*>(k_cache), static_cast<const bf16*>(v_cache), out, q_dt, o_dt,
               static_cast<int>(g.Hq / g.Hkv), g.T, g.Hq, g.Hkv, n_past, n_past_dev, scale};
    switch (g.D) {
        case 32: return launch_tc_d<32>(p, s);
        case 64: return launch_tc_d<64>(p, s);
        case 128: return launch_tc_d<128>(p, s);
        case 256: return launch_tc_d<256>(p, s);
        default: return false;
    }
}

}  // namespace grimoire::cuda::attn
