// The one-row FP8 MLP block in one persistent launch (decode): y = Wd (silu(Wg x) * (Wu x)) over the tile
// layout of quant/tile_layout.h, the gate | up weight stacked as forward_glu takes it.
//
// Why one launch (docs/BENCHMARKS.md, session 28's decode-chain probe): the one-row qmm of gate | up, the
// silu_mul and the qmm of down each ramp up and drain the weight stream, and down cannot start loading until
// gate | up has finished. Here one block per SM owns the whole block for both projections: a producer warp
// streams the block's share of gate | up and then of down into a shared-memory ring with bulk async copies
// (mbarrier completion), never waiting on the grid, so down's first tiles are in flight while gate | up's
// last rows, the grid barrier between the stages and h's staging run. Eight consumer warps take the tiles from
// the ring.
//
// Work: stage A's items are the I / 16 pairs (gate n-tile t, up n-tile t + I / 16), stage B's the D / 16
// n-tiles of down; a unit is one item over one 128-channel scale group (2 chunks: A 4 tiles of 1 KB, B 2).
// Each stage's units, item-major, are cut into G equal contiguous ranges (stream-K), so every SM streams the
// same bytes whatever the shapes. G <= both item counts, so an item is split between at most two neighbouring
// blocks: each writes its partial sums to the workspace and the second to arrive (a counter per block
// boundary) adds them (two terms: the same bits whichever arrives first) and stores the item.
// Within a block, unit i goes to consumer warp i % 8; a warp's sums of an item go to shared memory and the
// block adds them in warp order at the end of the stage. All deterministic.
//
// Numerics, as the library's one-row path (quant_qmv.cuh): E4M3 moved exactly into BF16 (a_fragment), x BF16,
// mma.sync with fp32 accumulation over a scale group, then acc = fma(group sum, scale, acc); g and u rounded to
// BF16 as stored parts would be, h = silu(g) * u rounded to BF16 (silu_mul's formula), y rounded to BF16. Only
// the summation order differs from the library's (per-warp group subsets), so results agree with it to fp32
// rounding, not bit for bit.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/quant_mma.cuh"
#include "kernels/cuda/quant_mma_tma.cuh"
#include "quant/tile_layout.h"

namespace grimoire::cuda {

namespace {

constexpr int kMaxWarps = 16;                     // consumer warps (8 or 16), + one producer warp
constexpr int kSlots = 32;                        // ring slots (a multiple of the consumer warps)
constexpr int kSlotBytes = 4096;                  // one stage-A unit: 4 tiles of 16 rows x 64 channels
constexpr int kTileBytes = 1024;                  // an FP8 chunk tile
constexpr int kTileU4 = kTileBytes / 16;
constexpr uint64_t kTimeoutNs = 4000000000ull;    // a grid wait this long is a bug: trap, don't hang the card

struct MlpArgs {
    const uint32_t* gu;  // gate | up tiles, NTg2 = 2 I / 16 n-tiles x KCa chunks
    const float* gus;    // [SNa][SGa]
    const uint32_t* dn;  // down tiles, NTd = D / 16 n-tiles x KCb chunks
    const float* dns;    // [SNb][SGb]
    const __nv_bfloat16* x;  // [D]
    __nv_bfloat16* h;        // [I]
    __nv_bfloat16* y;        // [D]
    float* part;             // [G][2][32] stage A, then [G][2][16] stage B
    unsigned* cnt;           // [G] stage A boundaries, [G] stage B boundaries, arrive, depart
    int D, I;                // x / y width, h width
    int bna, SGa, bnb, SGb;  // scale grids (rows per scale row; scale groups a row)
    int G;                   // grid blocks
    int red_items;           // items a block's red table holds (either stage)
};

__device__ __forceinline__ int range_at(int b, int W, int G) {
    return static_cast<int>(static_cast<int64_t>(b) * W / G);
}

__device__ __forceinline__ uint64_t now_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
template <int W>
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(W * 32) : "memory");
}

// Every block's consumers meet here (thread 0 of each). The counters end at zero: the last block to leave
// resets both, which no other block can still be reading (each has left: it saw `arrive` at G).
__device__ void grid_barrier(unsigned* arrive, unsigned* depart, unsigned G) {
    __threadfence();
    atomicAdd(arrive, 1u);
    const uint64_t t0 = now_ns();
    while (ld_acquire(arrive) < G)
        if (now_ns() - t0 > kTimeoutNs) __trap();
    if (atomicAdd(depart, 1u) == G - 1) {
        atomicExch(arrive, 0u);
        atomicExch(depart, 0u);
    }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using qmm::bulk_load;
using qmm::mbar_arrive;
using qmm::mbar_arrive_tx;
using qmm::mbar_init;
using qmm::mbar_wait;
#endif

// Stage geometry: items, groups an item, and this block's unit range.
struct Stage {
    int items, gpi, W, u0, u1;
    __device__ Stage(int items_, int gpi_, int b, int G) : items(items_), gpi(gpi_), W(items_ * gpi_) {
        u0 = range_at(b, W, G), u1 = range_at(b + 1, W, G);
    }
    __device__ int first_item() const { return u0 / gpi; }
    __device__ int n_items() const { return u1 > u0 ? (u1 - 1) / gpi - u0 / gpi + 1 : 0; }
};

struct Smem {
    alignas(128) uint8_t ring[kSlots][kSlotBytes];
    uint64_t full[kSlots], empty[kSlots];
    int finisher[2];
    // then: x / h (BF16, max(D, I) padded to 64), red [red_items][kWarps][32] f32
};

// The A fragment's four k-tiles of one chunk tile against the chunk of x (lane t's 16 channels), into c.
__device__ __forceinline__ void chunk_mma(float (&c)[4], const uint4 (&w)[2], uint4 xa, uint4 xb, bool first) {
    const uint32_t b0[4] = {xa.x, xa.z, xb.x, xb.z}, b1[4] = {xa.y, xa.w, xb.y, xb.w};
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {
        uint32_t a0, a1, a2, a3;
        qmm::a_fragment<true, 2>(w, kt, 0u, 0u, a0, a1, a2, a3);
        if (first && kt == 0)
            qmm::mma_bf16_first(c, a0, a1, a2, a3, b0[kt], b1[kt]);
        else
            qmm::mma_bf16(c, a0, a1, a2, a3, b0[kt], b1[kt]);
    }
}

// W consumer warps; MATH false: the consumers take the tiles without computing (a benchmark floor).
template <int W, bool MATH>
__global__ void __launch_bounds__((W + 1) * 32, 1) mlp_fp8_kernel(MlpArgs a) {
    constexpr int kWarps = W;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem_raw[];
    Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
    const int pad = (max(a.D, a.I) + 63) / 64 * 64;
    uint4* xs4 = reinterpret_cast<uint4*>(smem_raw + sizeof(Smem));  // x, then h: [pad] BF16
    float* red = reinterpret_cast<float*>(smem_raw + sizeof(Smem) + static_cast<size_t>(pad) * 2);
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int b = static_cast<int>(blockIdx.x), G = a.G;
    const int NTh = a.I / 16, NTa = 2 * NTh, KCa = a.D / 64, NTb = a.D / 16, KCb = a.I / 64;
    const Stage A(NTh, a.D / 128, b, G), B(NTb, a.I / 128, b, G);
    const int nA = A.u1 - A.u0, nB = B.u1 - B.u0;

    if (threadIdx.x == 0) {
        for (int i = 0; i < kSlots; ++i) mbar_init(&sm.full[i], 1), mbar_init(&sm.empty[i], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == kWarps) {  // producer: the block's units of both stages, in the consumers' order
        if (lane != 0) return;
        for (int it = 0; it < nA + nB; ++it) {
            const int slot = it % kSlots, use = it / kSlots;
            if (use > 0) mbar_wait(&sm.empty[slot], (use - 1) & 1);
            uint8_t* dst = sm.ring[slot];
            if (it < nA) {
                const int u = A.u0 + it, nt = u / A.gpi, c = 2 * (u % A.gpi);
                mbar_arrive_tx(&sm.full[slot], 4 * kTileBytes);
                const int ntl[2] = {nt, nt + NTh};
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    bulk_load(dst + q * kTileBytes,
                              a.gu + tile_index(ntl[q >> 1], c + (q & 1), NTa, KCa) * (kTileBytes / 4), kTileBytes,
                              &sm.full[slot]);
            } else {
                const int u = B.u0 + it - nA, nt = u / B.gpi, c = 2 * (u % B.gpi);
                mbar_arrive_tx(&sm.full[slot], 2 * kTileBytes);
#pragma unroll
                for (int q = 0; q < 2; ++q)
                    bulk_load(dst + q * kTileBytes, a.dn + tile_index(nt, c + q, NTb, KCb) * (kTileBytes / 4),
                              kTileBytes, &sm.full[slot]);
            }
        }
        return;
    }

    const int ct = static_cast<int>(threadIdx.x);  // consumer thread 0..255
    const int t = lane & 3, g = lane >> 2;
    // x (the previous kernel's output) and the workspace only after the previous grid has completed.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int i = ct; i < pad / 8; i += kWarps * 32)
        xs4[i] = i * 8 < a.D ? __ldcg(reinterpret_cast<const uint4*>(a.x) + i) : make_uint4(0u, 0u, 0u, 0u);
    for (int i = ct; i < a.red_items * kWarps * 32; i += kWarps * 32) red[i] = 0.0f;
    consumers_sync<W>();

    // ---- stage A: gate | up, per warp the units i = warp, warp + 8, ... of the block's range ----
    {
        float ag[2] = {0.0f, 0.0f}, au[2] = {0.0f, 0.0f};  // rows g, g + 8 of the current item
        int item = -1;
        auto flush = [&]() {
            if (item >= 0 && t == 0) {
                float* r = red + ((item - A.first_item()) * kWarps + warp) * 32;
                r[g] = ag[0], r[g + 8] = ag[1], r[16 + g] = au[0], r[24 + g] = au[1];
            }
            ag[0] = ag[1] = au[0] = au[1] = 0.0f;
        };
        for (int i = warp; i < nA; i += kWarps) {
            const int u = A.u0 + i, nt = u / A.gpi, grp = u % A.gpi;
            if (nt != item) flush(), item = nt;
            const float sg = __ldg(a.gus + static_cast<int64_t>(nt * 16 / a.bna) * a.SGa + grp);
            const float su = __ldg(a.gus + static_cast<int64_t>((nt + NTh) * 16 / a.bna) * a.SGa + grp);
            const uint4 x0a = xs4[(2 * grp) * 8 + 2 * t], x0b = xs4[(2 * grp) * 8 + 2 * t + 1];
            const uint4 x1a = xs4[(2 * grp + 1) * 8 + 2 * t], x1b = xs4[(2 * grp + 1) * 8 + 2 * t + 1];
            const int slot = i % kSlots;
            mbar_wait(&sm.full[slot], (i / kSlots) & 1);
            const uint4* s4 = reinterpret_cast<const uint4*>(sm.ring[slot]);
            uint4 w[4][2];
#pragma unroll
            for (int q = 0; q < 4; ++q) w[q][0] = s4[q * kTileU4 + 2 * lane], w[q][1] = s4[q * kTileU4 + 2 * lane + 1];
            __syncwarp();
            if (lane == 0) mbar_arrive(&sm.empty[slot]);
            float cg[4], cu[4];
            if constexpr (MATH) {
                chunk_mma(cg, w[0], x0a, x0b, true);
                chunk_mma(cg, w[1], x1a, x1b, false);
                chunk_mma(cu, w[2], x0a, x0b, true);
                chunk_mma(cu, w[3], x1a, x1b, false);
            } else {
                cg[0] = cg[2] = __uint_as_float((w[0][0].x ^ w[1][1].y ^ x0a.x) & 0x3FFFFFFFu);
                cu[0] = cu[2] = __uint_as_float((w[2][0].x ^ w[3][1].y ^ x1b.w) & 0x3FFFFFFFu);
            }
            ag[0] = fmaf(cg[0], sg, ag[0]), ag[1] = fmaf(cg[2], sg, ag[1]);
            au[0] = fmaf(cu[0], su, au[0]), au[1] = fmaf(cu[2], su, au[1]);
        }
        flush();
    }
    consumers_sync<W>();
    // The block's items: whole ones stored, the split ones (first / last) to the workspace.
    auto h_of = [](float gs, float us) {
        const float gq = __bfloat162float(__float2bfloat16(gs)), uq = __bfloat162float(__float2bfloat16(us));
        return __float2bfloat16(gq * sigmoidf_(gq) * uq);
    };
    const bool a_lo = A.u0 % A.gpi != 0, a_hi = A.u1 % A.gpi != 0;  // split with block b - 1 / b + 1
    for (int i = ct; i < A.n_items() * 16; i += kWarps * 32) {
        const int li = i >> 4, r = i & 15;
        float gs = 0.0f, us = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) gs += red[(li * kWarps + w) * 32 + r], us += red[(li * kWarps + w) * 32 + 16 + r];
        if (li == 0 && a_lo) {
            float* p = a.part + ((b - 1) * 2 + 1) * 32;
            __stcg(p + r, gs), __stcg(p + 16 + r, us);
        } else if (li == A.n_items() - 1 && a_hi) {
            float* p = a.part + (b * 2) * 32;
            __stcg(p + r, gs), __stcg(p + 16 + r, us);
        } else {
            a.h[(A.first_item() + li) * 16 + r] = h_of(gs, us);
        }
    }
    consumers_sync<W>();
    // Split items: the second block of the two to get here adds both halves (lower block's first).
    auto exchange = [&](bool lo, bool hi, unsigned* cnt) {
        if (ct == 0) {
            __threadfence();
            sm.finisher[0] = lo && atomicAdd(cnt + b - 1, 1u) == 1u;
            sm.finisher[1] = hi && atomicAdd(cnt + b, 1u) == 1u;
            if (sm.finisher[0]) atomicExch(cnt + b - 1, 0u);
            if (sm.finisher[1]) atomicExch(cnt + b, 0u);
            __threadfence();
        }
        consumers_sync<W>();
    };
    exchange(a_lo, a_hi, a.cnt);
    for (int k = 0; k < 2; ++k) {
        if (!sm.finisher[k] || ct >= 16) continue;
        const int bd = k == 0 ? b - 1 : b;
        const float* p = a.part + bd * 2 * 32;
        const float gs = __ldcg(p + ct) + __ldcg(p + 32 + ct), us = __ldcg(p + 16 + ct) + __ldcg(p + 48 + ct);
        a.h[range_at(bd + 1, A.W, G) / A.gpi * 16 + ct] = h_of(gs, us);
    }
    consumers_sync<W>();
    if (ct == 0) grid_barrier(a.cnt + 2 * G, a.cnt + 2 * G + 1, static_cast<unsigned>(G));
    consumers_sync<W>();
    // Every block is past stage A: the next kernel may launch (it still waits for this grid to complete).
    asm volatile("griddepcontrol.launch_dependents;");

    // ---- stage B: down over h ----
    for (int i = ct; i < pad / 8; i += kWarps * 32)
        xs4[i] = i * 8 < a.I ? __ldcg(reinterpret_cast<const uint4*>(a.h) + i) : make_uint4(0u, 0u, 0u, 0u);
    for (int i = ct; i < a.red_items * kWarps * 32; i += kWarps * 32) red[i] = 0.0f;
    consumers_sync<W>();
    {
        float ad[2] = {0.0f, 0.0f};
        int item = -1;
        auto flush = [&]() {
            if (item >= 0 && t == 0) {
                float* r = red + ((item - B.first_item()) * kWarps + warp) * 16;
                r[g] = ad[0], r[g + 8] = ad[1];
            }
            ad[0] = ad[1] = 0.0f;
        };
        for (int i = warp; i < nB; i += kWarps) {
            const int u = B.u0 + i, nt = u / B.gpi, grp = u % B.gpi;
            if (nt != item) flush(), item = nt;
            const float sd = __ldg(a.dns + static_cast<int64_t>(nt * 16 / a.bnb) * a.SGb + grp);
            const uint4 x0a = xs4[(2 * grp) * 8 + 2 * t], x0b = xs4[(2 * grp) * 8 + 2 * t + 1];
            const uint4 x1a = xs4[(2 * grp + 1) * 8 + 2 * t], x1b = xs4[(2 * grp + 1) * 8 + 2 * t + 1];
            const int it = nA + i, slot = it % kSlots;
            mbar_wait(&sm.full[slot], (it / kSlots) & 1);
            const uint4* s4 = reinterpret_cast<const uint4*>(sm.ring[slot]);
            uint4 w[2][2];
#pragma unroll
            for (int q = 0; q < 2; ++q) w[q][0] = s4[q * kTileU4 + 2 * lane], w[q][1] = s4[q * kTileU4 + 2 * lane + 1];
            __syncwarp();
            if (lane == 0) mbar_arrive(&sm.empty[slot]);
            float cd[4];
            if constexpr (MATH) {
                chunk_mma(cd, w[0], x0a, x0b, true);
                chunk_mma(cd, w[1], x1a, x1b, false);
            } else {
                cd[0] = cd[2] = __uint_as_float((w[0][0].x ^ w[1][1].y ^ x0a.x) & 0x3FFFFFFFu);
            }
            ad[0] = fmaf(cd[0], sd, ad[0]), ad[1] = fmaf(cd[2], sd, ad[1]);
        }
        flush();
    }
    consumers_sync<W>();
    const bool b_lo = B.u0 % B.gpi != 0, b_hi = B.u1 % B.gpi != 0;
    float* partB = a.part + static_cast<size_t>(G) * 2 * 32;
    for (int i = ct; i < B.n_items() * 16; i += kWarps * 32) {
        const int li = i >> 4, r = i & 15;
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) s += red[(li * kWarps + w) * 16 + r];
        if (li == 0 && b_lo)
            __stcg(partB + ((b - 1) * 2 + 1) * 16 + r, s);
        else if (li == B.n_items() - 1 && b_hi)
            __stcg(partB + (b * 2) * 16 + r, s);
        else
            a.y[(B.first_item() + li) * 16 + r] = __float2bfloat16(s);
    }
    consumers_sync<W>();
    exchange(b_lo, b_hi, a.cnt + G);
    for (int k = 0; k < 2; ++k) {
        if (!sm.finisher[k] || ct >= 16) continue;
        const int bd = k == 0 ? b - 1 : b;
        const float* p = partB + bd * 2 * 16;
        a.y[range_at(bd + 1, B.W, G) / B.gpi * 16 + ct] = __float2bfloat16(__ldcg(p + ct) + __ldcg(p + 16 + ct));
    }
#else
    (void)a;
#endif
}

constexpr int kMlpWarps = 16;  // the consumer warps of mlp_fp8

int sm_count() {
    static const int n = [] {
        int dev = 0, v = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
        return v;
    }();
    return n;
}

struct Plan {
    int G = 0, red_items = 0;
    size_t smem = 0;
};

Plan plan(int64_t D, int64_t I, int warps) {
    Plan p;
    const int64_t itemsA = I / 16, itemsB = D / 16;
    p.G = static_cast<int>(std::min<int64_t>({static_cast<int64_t>(sm_count()), itemsA, itemsB}));
    if (p.G < 1) return p;
    // A block's range holds at most ceil(W / G) units, so it touches at most that / gpi + 2 items.
    auto items_of = [&](int64_t items, int64_t gpi) {
        const int64_t per = (items * gpi + p.G - 1) / p.G;
        return static_cast<int>(per / gpi + 2);
    };
    p.red_items = std::max(items_of(itemsA, D / 128), items_of(itemsB, I / 128));
    const int64_t pad = (std::max(D, I) + 63) / 64 * 64;
    p.smem = sizeof(Smem) + static_cast<size_t>(pad) * 2 + static_cast<size_t>(p.red_items) * warps * 32 * 4;
    return p;
}

size_t max_smem() {
    static const size_t n = [] {
        int dev = 0, v = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        return static_cast<size_t>(v);
    }();
    return n;
}

}  // namespace

void mlp_fp8_workspace_need(size_t* partial_bytes, int* n_counters) {
    const int G = sm_count();
    *partial_bytes = static_cast<size_t>(G) * 2 * (32 + 16) * sizeof(float);
    *n_counters = 2 * G + 2;
}

bool mlp_fp8_ok(const Fp8Dev& gate_up, const Fp8Dev& down) {
    const int64_t D = gate_up.K, I = down.K;
    if (!device_is_hopper() || gate_up.N != 2 * I || down.N != D || D % 128 != 0 || I % 128 != 0) return false;
    // 128-channel scale groups (a unit is one group) and 16-row tiles inside one scale row.
    if (gate_up.bk != 128 || down.bk != 128 || gate_up.bn % 16 != 0 || down.bn % 16 != 0) return false;
    if (gate_up.SG != D / 128 || down.SG != I / 128) return false;
    const Plan p = plan(D, I, kMaxWarps);
    return p.G >= 1 && p.smem <= max_smem();
}

void mlp_fp8(const Fp8Dev& gate_up, const Fp8Dev& down, const Tensor& x, Tensor& h, Tensor& y,
             const QmmWorkspace& ws, cudaStream_t s) {
    mlp_fp8_variant(gate_up, down, x, h, y, ws, s, kMlpWarps, true);
}

void mlp_fp8_variant(const Fp8Dev& gate_up, const Fp8Dev& down, const Tensor& x, Tensor& h, Tensor& y,
                     const QmmWorkspace& ws, cudaStream_t s, int warps, bool math) {
    if (!mlp_fp8_ok(gate_up, down)) throw Error("cuda mlp_fp8: weights this kernel does not take (mlp_fp8_ok)");
    if (warps != 8 && warps != 16) throw Error("cuda mlp_fp8: 8 or 16 consumer warps");
    const int64_t D = gate_up.K, I = down.K;
    if (x.dtype != DType::BF16 || h.dtype != DType::BF16 || y.dtype != DType::BF16 || x.numel() != D ||
        y.numel() != D || h.numel() != I)
        throw Error("cuda mlp_fp8: x [1, D], h [1, I] and y [1, D] must be BF16 (D " + std::to_string(D) +
                    ", I " + std::to_string(I) + ")");
    size_t pb = 0;
    int nc = 0;
    mlp_fp8_workspace_need(&pb, &nc);
    if (!ws.partials || !ws.counters || ws.partial_bytes < pb || ws.n_counters < nc)
        throw Error("cuda mlp_fp8: workspace too small (reserve mlp_fp8_workspace_need)");
    const Plan p = plan(D, I, warps);
    MlpArgs a{};
    a.gu = gate_up.words, a.gus = gate_up.scales, a.dn = down.words, a.dns = down.scales;
    a.x = static_cast<const __nv_bfloat16*>(x.data);
    a.h = static_cast<__nv_bfloat16*>(h.data), a.y = static_cast<__nv_bfloat16*>(y.data);
    a.part = ws.partials, a.cnt = reinterpret_cast<unsigned*>(ws.counters);
    a.D = static_cast<int>(D), a.I = static_cast<int>(I);
    a.bna = static_cast<int>(gate_up.bn), a.SGa = static_cast<int>(gate_up.SG);
    a.bnb = static_cast<int>(down.bn), a.SGb = static_cast<int>(down.SG);
    a.G = p.G, a.red_items = p.red_items;
    auto launch = [&](auto kernel, int w) {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(max_smem()));
        launch_pdl(kernel, dim3(static_cast<unsigned>(p.G)), dim3(static_cast<unsigned>((w + 1) * 32)), p.smem, s, a);
    };
    if (warps == 16)
        math ? launch(mlp_fp8_kernel<16, true>, 16) : launch(mlp_fp8_kernel<16, false>, 16);
    else
        math ? launch(mlp_fp8_kernel<8, true>, 8) : launch(mlp_fp8_kernel<8, false>, 8);
    check_launch("mlp_fp8");
}

}  // namespace grimoire::cuda
