// Flash attention for prefill on tensor cores, FlashAttention-2 style: causal GQA, BF16 caches, head_dim
// 32/64/128/256, q and out BF16 or F32. Block = (query head, tile of BQ = 4 warps x 16 * MT query rows).
//
// Per block: Q [BQ, D] is staged once in shared memory; key/value tiles of BK rows stream through one K and
// one V buffer with cp.async, interleaved so that each load overlaps a matmul: V(j) loads while S = Q K(j)^T
// runs, K(j+1) loads while O += P V(j) runs (two buffers instead of four keep D = 256 at two blocks per SM).
// Every warp owns 16 * MT complete query rows, so the online softmax needs only the four lanes of a quad
// (mma.sync m16n8k16 accumulator layout: lane holds rows lane/4 and lane/4 + 8) and no shared memory: S stays
// in registers, is masked, exponentiated (exp2 with the scale folded into one FMA), rounded to BF16 and fed
// back as the A operand of P V without leaving the registers (the m16n8 accumulator pair of keys 16j..16j+15
// is exactly the A fragment of k-step j). O stays in fp32 registers.
//
// Shared-memory rows are padded by 16 bytes, so the 8 row addresses of each ldmatrix fall in 8 different
// 16-byte bank groups (no conflicts, no swizzle needed). Causal skipping: a block visits key tiles up to its
// last query's position only, and masks only the tiles that cross its first query's diagonal. Blocks are
// launched heaviest (last query tile) first to shorten the causal tail. The 6 query heads of a KV head re-read
// the same K/V tiles, which stay in L2 (all K/V of a 4096-token layer is 16 MB); sharing them in shared memory
// would force several heads' O accumulators into one block, which does not fit at D = 256.
#include "kernels/cuda/attention_impl.h"
#include "kernels/cuda/common.cuh"

namespace grimoire::cuda::attn {

namespace {
using bf16 = __nv_bfloat16;
constexpr int kWarps = 4;

struct Fa2Params {
    const void* q;        // [T, Hq, D] BF16 or F32
    const bf16* k_cache;  // [max_ctx, Hkv, D]
    const bf16* v_cache;
    void* out;  // [T, Hq, D] BF16 or F32
    int q_dt, o_dt, G;
    bool q_vec;  // BF16 q with 16-byte aligned rows: staged by cp.async
    int64_t T, Hq, Hkv, n_past;
    const int* n_past_dev;
    float scale;
};

// Tile shape per head_dim: D = 256 keeps one m16 tile per warp (O alone is 128 fp32 registers per lane), the
// smaller ones two (halves the shared-memory reads of K and V per FLOP, the kernel's limiting resource).
template <int D>
struct Cfg {
    static constexpr int MT = D == 256 ? 1 : 2;  // m16 tiles per warp
    static constexpr int BQ = kWarps * 16 * MT;  // query rows per block
    static constexpr int BK = D == 128 ? 32 : 64;  // key rows per tile
    static constexpr int LD = D + 8;             // smem row stride in bf16 (16-byte pad)
    static constexpr size_t smem = sizeof(bf16) * static_cast<size_t>(BQ + 2 * BK) * LD;
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, bypassing L1; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
// Two n8 tiles that share the A fragment; b is one ldmatrix.x4: (b0, b1) of the first tile, then the second's.
__device__ __forceinline__ void mma_pair(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4], const uint32_t (&b)[4]) {
    mma16816(c0, a[0], a[1], a[2], a[3], b[0], b[1]);
    mma16816(c1, a[0], a[1], a[2], a[3], b[2], b[3]);
}
__device__ __forceinline__ float exp2_approx(float x) {  // ex2(-inf) = +0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// Rows [k0, k0 + BK) of one KV head's cache into a [BK, LD] tile; rows >= kend become zeros (their P is 0,
// but 0 * NaN from an unwritten cache row would still poison O).
template <int D>
__device__ __forceinline__ void load_kv_tile(uint32_t dst, const bf16* base, int64_t row, int64_t k0, int64_t kend) {
    using C = Cfg<D>;
    constexpr int kChunks = D / 8;                       // 16-byte chunks per row
    constexpr int kRowsPerPass = 32 * kWarps / kChunks;  // a thread keeps its column and steps rows
    static_assert(C::BK % kRowsPerPass == 0, "whole rows per pass");
    const int r0 = threadIdx.x / kChunks, c = (threadIdx.x % kChunks) * 8;
    const bf16* src = base + (k0 + r0) * row + c;
    dst += static_cast<uint32_t>((r0 * C::LD + c) * sizeof(bf16));
#pragma unroll
    for (int n = 0; n < C::BK / kRowsPerPass; ++n) {
        const bool ok = k0 + r0 + n * kRowsPerPass < kend;
        cp_async16(dst + n * kRowsPerPass * C::LD * sizeof(bf16), ok ? src + n * kRowsPerPass * row : base, ok);
    }
}
}  // namespace

template <int D>
static __global__ void __launch_bounds__(32 * kWarps, 2) prefill_fa2_kernel(Fa2Params p) {
    using C = Cfg<D>;
    constexpr int MT = C::MT, BQ = C::BQ, BK = C::BK, LD = C::LD;
    constexpr int NT = BK / 8;  // n8 tiles of S per m16 tile
    constexpr int DT = D / 8;   // n8 tiles of O per m16 tile
    extern __shared__ __align__(128) unsigned char smem[];
    bf16* Qs = reinterpret_cast<bf16*>(smem);
    const uint32_t q_s = smem_u32(Qs), k_s = q_s + BQ * LD * 2, v_s = k_s + BK * LD * 2;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t h = blockIdx.x, kvh = h / p.G;
    const int64_t t0 = static_cast<int64_t>(gridDim.y - 1 - blockIdx.y) * BQ;  // heaviest tiles first
    const int64_t n_past = p.n_past_dev ? *p.n_past_dev : p.n_past;
    const int64_t kend = n_past + (t0 + BQ < p.T ? t0 + BQ : p.T);  // keys [0, kend) are visible to some row
    const int ntiles = static_cast<int>((kend + BK - 1) / BK);
    const int64_t row = p.Hkv * D;
    const bf16* kbase = p.k_cache + kvh * D;
    const bf16* vbase = p.v_cache + kvh * D;

    // Q tile (rows past T are zeros: their scores are finite and their outputs are never stored).
    if (p.q_vec) {
        const bf16* q = static_cast<const bf16*>(p.q);
        for (int i = threadIdx.x; i < BQ * (D / 8); i += 32 * kWarps) {
            const int r = i / (D / 8), c = (i % (D / 8)) * 8;
            const bool ok = t0 + r < p.T;
            cp_async16(q_s + static_cast<uint32_t>((r * LD + c) * 2), q + ((ok ? t0 + r : 0) * p.Hq + h) * D + c, ok);
        }
    } else {
        for (int i = threadIdx.x; i < BQ * D; i += 32 * kWarps) {
            const int r = i / D, c = i % D;
            const int64_t t = t0 + r;
            Qs[r * LD + c] = __float2bfloat16(t < p.T ? ld(p.q, p.q_dt, (t * p.Hq + h) * D + c) : 0.0f);
        }
    }
    load_kv_tile<D>(k_s, kbase, row, 0, kend);
    cp_async_commit();

    // Per-lane ldmatrix addresses (see the fragment layouts of mma.m16n8k16): Q as A (rows lane % 16, column
    // half lane / 16), K as B non-transposed (key rows lane % 8 + 8 * (lane / 16), column half (lane / 8) % 2),
    // V as B transposed (key rows lane % 8 + 8 * ((lane / 8) % 2), column half lane / 16).
    const int wrow = warp * 16 * MT;
    const uint32_t q_lane = q_s + static_cast<uint32_t>(((wrow + (lane & 15)) * LD + (lane >> 4) * 8) * 2);
    const uint32_t k_lane = k_s + static_cast<uint32_t>((((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8) * 2);
    const uint32_t v_lane = v_s + static_cast<uint32_t>((((lane & 7) + (((lane >> 3) & 1) << 3)) * LD + (lane >> 4) * 8) * 2);

    const int g = lane >> 2, tq = lane & 3;
    const float sl = p.scale * 1.4426950408889634f;  // scores to log2 units
    float o[MT][DT][4];
    float m[MT][2], l[MT][2];  // running max (raw score) and this lane's partial row sum, rows g and g + 8
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.0f;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) m[mt][hh] = -INFINITY, l[mt][hh] = 0.0f;
    }

    for (int it = 0; it < ntiles; ++it) {
        const int64_t k0 = static_cast<int64_t>(it) * BK;
        cp_async_wait_all();
        __syncthreads();  // K(it) (and Q) landed; every warp is done with V(it - 1)
        load_kv_tile<D>(v_s, vbase, row, k0, kend);
        cp_async_commit();

        // S [16 * MT, BK] = Q K(it)^T
        float s[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) ldsm_x4(a[mt], q_lane + (mt * 16 * LD + kk * 16) * 2);
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                uint32_t b[4];
                ldsm_x4(b, k_lane + (np * 16 * LD + kk * 16) * 2);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) mma_pair(s[mt][2 * np], s[mt][2 * np + 1], a[mt], b);
            }
        }

        // Causal mask, only on tiles that cross the block's first diagonal (key k0 + c vs query t0 + r).
        if (k0 + BK - 1 > n_past + t0) {
            // key column c is visible to block row r iff c <= lim + r (lim >= -BQ: tile k0 < kend)
            const int lim = static_cast<int>(n_past + t0 - k0);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int r = wrow + mt * 16 + g + (e >> 1) * 8, c = nt * 8 + tq * 2 + (e & 1);
                        if (c > lim + r) s[mt][nt][e] = -INFINITY;
                    }
        }

        // Online softmax; P overwrites S, then becomes BF16 A fragments.
        uint32_t pa[MT][BK / 16][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                float mx = m[mt][hh];
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                // Key 0 is in tile 0 and visible to every row, so mx is finite from the first tile on; the
                // guard only keeps -inf - -inf out should that ever change.
                const float base = mx == -INFINITY ? 0.0f : mx * sl;
                const float corr = exp2_approx(m[mt][hh] * sl - base);
                m[mt][hh] = mx;
                float sum = 0.0f;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 2 * hh; e < 2 * hh + 2; ++e) {
                        const float pv = exp2_approx(fmaf(s[mt][nt][e], sl, -base));
                        s[mt][nt][e] = pv;
                        sum += pv;
                    }
                l[mt][hh] = l[mt][hh] * corr + sum;
#pragma unroll
                for (int dt = 0; dt < DT; ++dt) {
                    o[mt][dt][2 * hh] *= corr;
                    o[mt][dt][2 * hh + 1] *= corr;
                }
            }
#pragma unroll
            for (int j = 0; j < BK / 16; ++j) {
                pa[mt][j][0] = pack_bf16(s[mt][2 * j][0], s[mt][2 * j][1]);
                pa[mt][j][1] = pack_bf16(s[mt][2 * j][2], s[mt][2 * j][3]);
                pa[mt][j][2] = pack_bf16(s[mt][2 * j + 1][0], s[mt][2 * j + 1][1]);
                pa[mt][j][3] = pack_bf16(s[mt][2 * j + 1][2], s[mt][2 * j + 1][3]);
            }
        }

        cp_async_wait_all();
        __syncthreads();  // V(it) landed; every warp is done with K(it)
        if (it + 1 < ntiles) load_kv_tile<D>(k_s, kbase, row, k0 + BK, kend);
        cp_async_commit();

        // O [16 * MT, D] += P [16 * MT, BK] V(it) [BK, D]
#pragma unroll
        for (int j = 0; j < BK / 16; ++j) {
#pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
                uint32_t b[4];
                ldsm_x4_trans(b, v_lane + (j * 16 * LD + dp * 16) * 2);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) mma_pair(o[mt][2 * dp], o[mt][2 * dp + 1], pa[mt][j], b);
            }
        }
    }

#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            float lt = l[mt][hh];
            lt += __shfl_xor_sync(0xffffffffu, lt, 1);
            lt += __shfl_xor_sync(0xffffffffu, lt, 2);
            const float inv = 1.0f / lt;
            const int64_t t = t0 + wrow + mt * 16 + g + hh * 8;
            if (t >= p.T) continue;
            const int64_t ob = (t * p.Hq + h) * D + tq * 2;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                const float x0 = o[mt][dt][2 * hh] * inv, x1 = o[mt][dt][2 * hh + 1] * inv;
                if (p.o_dt == kBF16)
                    *reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(p.out) + ob + dt * 8) =
                        __floats2bfloat162_rn(x0, x1);
                else if (p.o_dt == kF32)
                    *reinterpret_cast<float2*>(static_cast<float*>(p.out) + ob + dt * 8) = make_float2(x0, x1);
                else {
                    st(p.out, p.o_dt, ob + dt * 8, x0);
                    st(p.out, p.o_dt, ob + dt * 8 + 1, x1);
                }
            }
        }
}

template <int D>
static bool launch_fa2_d(const Fa2Params& p, cudaStream_t s) {
    using C = Cfg<D>;
    static int state = 0;  // 0 unknown, 1 ok, -1 the device cannot give this much shared memory
    if (state == 0)
        state = cudaFuncSetAttribute(prefill_fa2_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(C::smem)) == cudaSuccess ? 1 : -1;
    if (state < 0) {
        cudaGetLastError();
        return false;
    }
    const int64_t tiles = (p.T + C::BQ - 1) / C::BQ;
    if (tiles > 65535 || p.Hq > 65535) return false;
    dim3 grid(static_cast<unsigned>(p.Hq), static_cast<unsigned>(tiles));
    prefill_fa2_kernel<D><<<grid, 32 * kWarps, C::smem, s>>>(p);
    check_launch("attention prefill (tensor cores)");
    return true;
}

bool launch_prefill_tc(const void* q, int q_dt, const void* k_cache, const void* v_cache, const Geometry& g,
                       int64_t n_past, const int* n_past_dev, float scale, void* out, int o_dt, cudaStream_t s) {
    // Tiles are read in 16-byte chunks and outputs written in pairs: views at odd offsets take the SIMT kernel.
    auto aligned = [](const void* ptr, uintptr_t a) { return reinterpret_cast<uintptr_t>(ptr) % a == 0; };
    if (!aligned(k_cache, 16) || !aligned(v_cache, 16) || !aligned(out, 8)) return false;
    Fa2Params p{q, static_cast<const bf16*>(k_cache), static_cast<const bf16*>(v_cache), out, q_dt, o_dt,
                static_cast<int>(g.Hq / g.Hkv), q_dt == kBF16 && aligned(q, 16), g.T, g.Hq, g.Hkv, n_past,
                n_past_dev, scale};
    switch (g.D) {
        case 32: return launch_fa2_d<32>(p, s);
        case 64: return launch_fa2_d<64>(p, s);
        case 128: return launch_fa2_d<128>(p, s);
        case 256: return launch_fa2_d<256>(p, s);
        default: return false;
    }
}

}  // namespace grimoire::cuda::attn
