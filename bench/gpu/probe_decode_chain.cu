// Probe (bench only) for the decode target of issue 5: can ONE persistent kernel that streams a decode
// chain's weights straight across its dependent one-row projections keep HBM busy where one launch per op
// does not? Sessions 18-25 (docs/BENCHMARKS.md) found the quantized linears at ~0.79 of copy inside the step
// and ~450 small launches costing 0.6-0.8 ms more: the per-launch ramp and tail, and the stall of the weight
// stream at every small op. A weight never depends on the activations, so a kernel that owns every SM for the
// whole chain can keep loading the next projection's weights while the current one's last rows, the grid
// barrier and the next small op (here the RMSNorm) run.
//
// The chain is the 27B MLP, L layers of: xn = rmsnorm(res) * wn; h = silu(W_gate xn) * (W_up xn) (5120 ->
// 2 x 17408); res += W_down h (17408 -> 5120); one row; INT4 symmetric group 128 with F16 scales, and FP8
// E4M3 with F32 scales per 128 channels. Forms timed on the same chain (same bytes per layer), per format:
// - persist: one cooperative launch for all 2 L stages, one block per SM. A producer warp streams the
//   block's tiles of every stage in order into a 4 x 48 KB shared ring by bulk async copies (mbarrier
//   completion) and never waits on the grid; 8 consumer warps wait at a grid barrier per stage (arrival
//   counters) for the stage's input, then take the tiles from the ring.
// - persist_noacross: the same, but the producer also waits for the previous stage before streaming a
//   stage's tiles (what persistence alone buys, without streaming across the dependency).
// - persist_loads: persist with the consumers taking the tiles without computing (the streaming bound).
// - stages: the same kernel launched once per stage, 2 L plain launches replayed from a CUDA graph (the
//   kernel-per-op form of the same code).
// - stages_pdl: stages with programmatic launches: a stage's producer streams as soon as its blocks fit,
//   before the previous stage has finished (only as that one's blocks leave: one block fills an SM).
// - layer: one launch per layer, its stages behind grid barriers (what would fit the engine's step as one
//   kernel per MLP block).
// - library: the library's chain on the same shapes as the decode step runs it: add_rmsnorm, qmm of the
//   stacked gate | up (INT4 with glu parts; FP8 one row then silu_mul), qmm of down (graph, programmatic
//   launches).
// - state_*: persist, persist_noacross, stages and layer with a third stage a layer after down, a stand-in
//   for the Gated DeltaNet step: 40 blocks read and write 64 KB states while the other SMs have nothing to
//   compute (state_stage below). Its 5 MB of state traffic a layer is not in the ratios.
// Also: one grid barrier of these counters against one empty launch in a graph (grid_barrier_us,
// empty_launch_us), what a stage boundary costs each way.
// The probe's weight layout (a tile = R whole rows, contiguous, then their scales) and its CUDA-core dot
// product (half2) are its own: the library's tile layout and mma path are not reproduced. What it measures
// is the structure: persist and layer against stages, persist_loads against copy.
//
// Checked first on 2-layer chains, with and without the state stage, against a host reference (double sums
// of the same half-rounded xn and h); the persistent, per-stage (plain and programmatic) and per-layer forms
// must agree bit for bit (same code, same order).
//
//   probe_decode_chain [--layers L] [--only int4|fp8] [--fused-only] [--out results.json] [--commit SHA]
// --fused-only: after the checks, only the library's chain and its fused forms (FP8) are timed.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_quant_weights.h"
#include "bench_timing.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/quant_mma_tma.cuh"
#include "quant/tile_layout.h"

namespace gc = grimoire::cuda;
namespace qmm = grimoire::cuda::qmm;
using grimoire::DType;
using grimoire::Tensor;
using grimoire::bench::check;

namespace {

bool g_fused_only = false;  // --fused-only

constexpr int kConsumerWarps = 8;
constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp
constexpr int kSlots = 4;
constexpr int kSlotBytes = 48 * 1024;
constexpr int kD = 5120, kI = 17408;  // the 27B hidden and intermediate sizes
constexpr float kEps = 1e-6f;
constexpr int kHead = 128, kHeads = kD / kHead;  // the state stage: 40 heads of 128 over the residual

// Each format's tile geometry. A row of an [N, K] weight is its codes (16-byte vectors: 32 INT4 or 16 FP8
// channels), then its K / 128 scales (F16 for INT4, F32 for FP8) in the tile's scale block after the rows.
// INT4: within a vector, word j (0..3) holds channels 8 j + e at nibble (e & 1) * 4 + (e >> 1), so one shift
// + mask + or of the word gives the half2 pair (channel 2 i, 2 i + 1) as 1024 + q. FP8: E4M3 bytes in
// channel order; the format's 128 x 128 scale blocks are stored per row here (its bytes are counted).
// gate | up: a tile is the gate rows, then the up rows of the same outputs of h; its kGuParts warps per
// output each cover kGuSlice vectors of both rows. down: warp w covers vectors [kDnSlice w, + kDnSlice) of
// every row of the tile. A lane takes the vectors l + 32 i of its warp's slice, so its x stays in registers.
template <bool FP8>
struct Fmt {
    static constexpr int kVecCh = FP8 ? 16 : 32;  // channels a 16-byte vector
    static constexpr int kScaleBytes = FP8 ? 4 : 2;
    static constexpr int kGuRows = FP8 ? 8 : 16, kGuPairs = kGuRows / 2;
    static constexpr int kDnRows = FP8 ? 2 : 4;
    __host__ __device__ static constexpr int qbytes(int K) { return FP8 ? K : K / 2; }
    __host__ __device__ static constexpr int row_bytes(int K) { return qbytes(K) + kScaleBytes * (K / 128); }
    static constexpr int kGuTileBytes = kGuRows * row_bytes(kD);  // 42240 (both formats)
    static constexpr int kDnTileBytes = kDnRows * row_bytes(kI);  // 35904 (both formats)
    static constexpr int kGuTiles = kI / kGuPairs, kDnTiles = kD / kDnRows;
    static constexpr size_t kGuBytes = static_cast<size_t>(kGuTiles) * kGuTileBytes;
    static constexpr size_t kDnBytes = static_cast<size_t>(kDnTiles) * kDnTileBytes;
    static constexpr int kGuParts = kConsumerWarps / kGuPairs;     // 1 / 2
    static constexpr int kGuSlice = kD / kVecCh / kGuParts;        // 160
    static constexpr int kGuLaneVecs = kGuSlice / 32;              // 5
    static constexpr int kDnSlice = kI / kVecCh / kConsumerWarps;  // 68 / 136
    static constexpr int kDnLaneVecs = (kDnSlice + 31) / 32;       // 3 / 5
    static constexpr int kVecPairs = kVecCh / 2;                   // half2 of x a vector
    static constexpr int kVecsPerGroup = 128 / kVecCh;
    static_assert(kGuTileBytes <= kSlotBytes && kDnTileBytes <= kSlotBytes, "a tile fits a ring slot");
    static_assert(kGuTileBytes % 16 == 0 && kDnTileBytes % 16 == 0, "bulk copies move 16-byte multiples");
    static_assert(kGuSlice % 32 == 0 && kI / kVecCh % kConsumerWarps == 0, "the lane split covers K exactly");
    static_assert(kGuParts * kGuPairs == kConsumerWarps, "the gate | up warps cover the tile");
};

struct Chain {
    const uint8_t* gu = nullptr;  // [layers][Fmt::kGuBytes]
    const uint8_t* dn = nullptr;  // [layers][Fmt::kDnBytes]
    const float* wn = nullptr;    // [layers][kD] RMSNorm weights
    float* res = nullptr;         // [kD] the residual stream
    __half* h = nullptr;          // [kI]
    float* state = nullptr;       // [kHeads][128][128] the state stage's matrices (per_layer 3)
    unsigned* cnt = nullptr;      // [per_layer x layers] blocks arrived per stage (cumulative over launches)
    unsigned epoch = 0;           // launches before this one on `cnt`: a stage is done at (epoch + 1) x grid
    int per_layer = 2;            // stages a layer: gate | up, down, and with 3 the state stage
    int s0 = 0, s1 = 0;  // stages of this launch: stage s is kind s % per_layer of layer s / per_layer
    int across = 1;      // the producer streams stage s + 1 before stage s is done everywhere
    int math = 1;        // 0: the consumers take tiles without computing
    int pdl = 0;         // launched with the programmatic-launch attribute: consumers wait before reading
};

constexpr uint64_t kTimeoutNs = 2000000000ull;  // a wait this long is a bug: trap instead of hanging the card
using qmm::globaltimer_ns;
using qmm::ld_acquire_gpu;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using qmm::bulk_load;
using qmm::mbar_arrive;
using qmm::mbar_arrive_tx;
using qmm::mbar_init;
// quant_mma_tma.cuh's wait, bounded: a probe run blind must trap rather than hang the card.
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
    qmm::mbar_wait_bounded(b, parity, kTimeoutNs);
}
#endif
__device__ __forceinline__ void red_release(unsigned* p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ void wait_count(const unsigned* p, unsigned target) {
    if (ld_acquire_gpu(p) >= target) return;
    const uint64_t t0 = globaltimer_ns();
    while (ld_acquire_gpu(p) < target)
        if (globaltimer_ns() - t0 > kTimeoutNs) __trap();
}
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32) : "memory");
}
using grimoire::cuda::warp_sum;

// sum over the vector's channels of w x, in half2, then widened. INT4: w = q - 8 (the codes and q - 8 are
// exact in half; the products and adds round to 11 bits over 16 steps of |term| <= 8 |x|). FP8: w = e4m3(b),
// exact in half, 8 steps.
template <bool FP8>
__device__ __forceinline__ float dot_vec(const uint4 w, const half2* x) {
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
    half2 acc = __float2half2_rn(0.f);
    if constexpr (FP8) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(
                    static_cast<__nv_fp8x2_storage_t>(ws[j] >> (16 * i)), __NV_E4M3);
                acc = __hfma2(half2(r), x[2 * j + i], acc);
            }
        }
    } else {
        const half2 bias = __float2half2_rn(1032.f);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t m = ((ws[j] >> (4 * i)) & 0x000F000Fu) | 0x64006400u;
                half2 q;
                memcpy(&q, &m, 4);
                acc = __hfma2(__hsub2(q, bias), x[4 * j + i], acc);
            }
        }
    }
    return __low2float(acc) + __high2float(acc);
}
template <bool FP8>
__device__ __forceinline__ float scale_at(const uint8_t* block, int i) {
    if constexpr (FP8)
        return reinterpret_cast<const float*>(block)[i];
    else
        return __half2float(reinterpret_cast<const __half*>(block)[i]);
}

struct Smem {
    alignas(128) uint8_t ring[kSlots][kSlotBytes];
    half2 xs[kD / 2];                    // the stage's xn (gate | up), half
    float red[2][4][kConsumerWarps];     // down: per-warp partials of up to 4 rows, double-buffered by tile
    float red_gu[2][kConsumerWarps][2];  // gate | up split over warps (FP8): per-warp g and u
    float ss[kConsumerWarps];
    float ss_k[128];  // the state stage's k
    uint64_t full[kSlots], empty[kSlots];
};

// The state stage, a stand-in for the Gated DeltaNet step between the projections: 40 heads of 64 KB, read
// and written by 40 blocks while the other SMs have nothing to compute. Block b < kHeads takes
// k = res[128 b .. 128 b + 127] / |k|, S_b = 0.9 S_b + k k^T, res[128 b + i] += 0.5 (S_b k)_i (large enough
// that the check sees a wrong index); each block touches only its own slice of res.
__device__ void state_stage(const Chain& c, Smem& sm, int b, int warp, int lane, int ct) {
    float* kv = sm.ss_k;
    if (ct < kHead) kv[ct] = __ldcg(c.res + kHead * b + ct);
    consumers_sync();
    if (warp == 0) {
        float n2 = 0.f;
        for (int i = lane; i < kHead; i += 32) n2 += kv[i] * kv[i];
        n2 = warp_sum(n2);
        if (lane == 0) sm.ss[0] = rsqrtf(n2 + 1e-12f);
    }
    consumers_sync();
    const float inv = sm.ss[0];
    const float4 kj = make_float4(kv[4 * lane] * inv, kv[4 * lane + 1] * inv, kv[4 * lane + 2] * inv,
                                  kv[4 * lane + 3] * inv);
    float* S = c.state + static_cast<size_t>(b) * kHead * kHead;
    for (int i = warp; i < kHead; i += kConsumerWarps) {
        float4* row = reinterpret_cast<float4*>(S + i * kHead) + lane;
        const float ki = kv[i] * inv;
        float4 v = __ldcg(row);
        v.x = 0.9f * v.x + ki * kj.x, v.y = 0.9f * v.y + ki * kj.y;
        v.z = 0.9f * v.z + ki * kj.z, v.w = 0.9f * v.w + ki * kj.w;
        __stcg(row, v);
        const float o = warp_sum(v.x * kj.x + v.y * kj.y + v.z * kj.z + v.w * kj.w);
        if (lane == 0) __stcg(c.res + kHead * b + i, kv[i] + 0.5f * o);
    }
}

template <bool FP8>
__global__ void __launch_bounds__(kThreads, 1) chain_kernel(Chain c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using F = Fmt<FP8>;
    extern __shared__ __align__(128) uint8_t smem_raw[];
    Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const unsigned G = gridDim.x, target = (c.epoch + 1) * G;
    if (threadIdx.x == 0) {
        for (int i = 0; i < kSlots; ++i) mbar_init(&sm.full[i], 1), mbar_init(&sm.empty[i], kConsumerWarps);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    // Programmatic launch: the next stage's grid may start as this one's blocks leave (one block fills an
    // SM); its producer streams weights at once, its consumers wait below for this grid's results.
    if (c.pdl) asm volatile("griddepcontrol.launch_dependents;");

    if (warp == kConsumerWarps) {  // producer: every stage's tiles of this block, in the consumers' order
        if (lane != 0) return;
        uint32_t it = 0;
        for (int s = c.s0; s < c.s1; ++s) {
            if (!c.across && s > c.s0) wait_count(&c.cnt[s - 1], target);
            const int kind = s % c.per_layer, layer = s / c.per_layer;
            if (kind == 2) continue;  // the state stage streams no weights
            const bool gu = kind == 0;
            const uint8_t* base = gu ? c.gu + static_cast<size_t>(layer) * F::kGuBytes
                                     : c.dn + static_cast<size_t>(layer) * F::kDnBytes;
            const int tiles = gu ? F::kGuTiles : F::kDnTiles, tb = gu ? F::kGuTileBytes : F::kDnTileBytes;
            for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(G), ++it) {
                const int slot = static_cast<int>(it % kSlots);
                const uint32_t use = it / kSlots;
                if (use > 0) mbar_wait(&sm.empty[slot], (use - 1) & 1);
                mbar_arrive_tx(&sm.full[slot], static_cast<unsigned>(tb));
                bulk_load(sm.ring[slot], base + static_cast<size_t>(t) * tb, static_cast<unsigned>(tb),
                          &sm.full[slot]);
            }
        }
        return;
    }

    const int ct = static_cast<int>(threadIdx.x);  // consumer thread 0..255
    uint32_t it = 0;
    int rbuf = 0;
    for (int s = c.s0; s < c.s1; ++s) {
        if (s > c.s0) {
            if (ct == 0) wait_count(&c.cnt[s - 1], target);
            consumers_sync();
        } else if (c.pdl) {
            asm volatile("griddepcontrol.wait;" ::: "memory");
        }
        const int kind = s % c.per_layer, layer = s / c.per_layer;
        if (kind == 2) {
            if (blockIdx.x < kHeads) state_stage(c, sm, static_cast<int>(blockIdx.x), warp, lane, ct);
        } else if (kind == 0) {
            // xn = rmsnorm(res) * wn into shared memory (each thread 20 channels), then each lane's into
            // registers.
            const float* wn = c.wn + static_cast<size_t>(layer) * kD;
            constexpr int kPer = kD / 4 / (kConsumerWarps * 32);
            float4 r[kPer];
            float ss = 0.f;
#pragma unroll
            for (int i = 0; i < kPer; ++i) {
                r[i] = __ldcg(reinterpret_cast<const float4*>(c.res) + ct + i * kConsumerWarps * 32);
                ss += r[i].x * r[i].x + r[i].y * r[i].y + r[i].z * r[i].z + r[i].w * r[i].w;
            }
            ss = warp_sum(ss);
            if (lane == 0) sm.ss[warp] = ss;
            consumers_sync();
            float tot = 0.f;
#pragma unroll
            for (int w = 0; w < kConsumerWarps; ++w) tot += sm.ss[w];
            const float inv = rsqrtf(tot / kD + kEps);
#pragma unroll
            for (int i = 0; i < kPer; ++i) {
                const int q4 = ct + i * kConsumerWarps * 32;
                const float4 g = __ldg(reinterpret_cast<const float4*>(wn) + q4);
                sm.xs[2 * q4] = __floats2half2_rn(r[i].x * inv * g.x, r[i].y * inv * g.y);
                sm.xs[2 * q4 + 1] = __floats2half2_rn(r[i].z * inv * g.z, r[i].w * inv * g.w);
            }
            consumers_sync();
            const int pair = warp % F::kGuPairs, part = warp / F::kGuPairs;
            half2 x[F::kGuLaneVecs][F::kVecPairs];
#pragma unroll
            for (int i = 0; i < F::kGuLaneVecs; ++i)
#pragma unroll
                for (int q = 0; q < F::kVecPairs; ++q)
                    x[i][q] = sm.xs[F::kVecPairs * (F::kGuSlice * part + lane + 32 * i) + q];
            for (int t = static_cast<int>(blockIdx.x); t < F::kGuTiles; t += static_cast<int>(G), ++it) {
                const int slot = static_cast<int>(it % kSlots);
                mbar_wait(&sm.full[slot], (it / kSlots) & 1);
                float g = 0.f, u = 0.f;
                if (c.math) {
                    const uint8_t* tile = sm.ring[slot];
                    const uint8_t* sc = tile + F::kGuRows * F::qbytes(kD);
                    const uint8_t* rg = tile + pair * F::qbytes(kD);
                    const uint8_t* ru = tile + (pair + F::kGuPairs) * F::qbytes(kD);
                    const int sg = pair * (kD / 128), su = (pair + F::kGuPairs) * (kD / 128);
#pragma unroll
                    for (int i = 0; i < F::kGuLaneVecs; ++i) {
                        const int v = F::kGuSlice * part + lane + 32 * i;
                        const uint4 wg = *reinterpret_cast<const uint4*>(rg + 16 * v);
                        const uint4 wu = *reinterpret_cast<const uint4*>(ru + 16 * v);
                        g += scale_at<FP8>(sc, sg + v / F::kVecsPerGroup) * dot_vec<FP8>(wg, x[i]);
                        u += scale_at<FP8>(sc, su + v / F::kVecsPerGroup) * dot_vec<FP8>(wu, x[i]);
                    }
                    g = warp_sum(g), u = warp_sum(u);
                }
                __syncwarp();
                if (lane == 0) mbar_arrive(&sm.empty[slot]);
                if constexpr (F::kGuParts == 1) {
                    if (lane == 0)
                        __stcg(c.h + t * F::kGuPairs + pair, __float2half_rn(g / (1.f + __expf(-g)) * u));
                } else {
                    if (lane == 0) sm.red_gu[rbuf][warp][0] = g, sm.red_gu[rbuf][warp][1] = u;
                    consumers_sync();
                    if (ct < F::kGuPairs) {
                        float gs = 0.f, us = 0.f;
#pragma unroll
                        for (int q = 0; q < F::kGuParts; ++q)
                            gs += sm.red_gu[rbuf][ct + q * F::kGuPairs][0],
                                us += sm.red_gu[rbuf][ct + q * F::kGuPairs][1];
                        __stcg(c.h + t * F::kGuPairs + ct, __float2half_rn(gs / (1.f + __expf(-gs)) * us));
                    }
                    rbuf ^= 1;
                }
            }
        } else {
            // down: this lane's h channels straight into registers.
            half2 x[F::kDnLaneVecs][F::kVecPairs];
#pragma unroll
            for (int i = 0; i < F::kDnLaneVecs; ++i) {
                const int lv = lane + 32 * i;
                const int v = F::kDnSlice * warp + (lv < F::kDnSlice ? lv : 0);
                const uint4* src = reinterpret_cast<const uint4*>(c.h + F::kVecCh * v);
#pragma unroll
                for (int q = 0; q < F::kVecCh / 8; ++q) {
                    const uint4 w = __ldcg(src + q);
                    memcpy(&x[i][4 * q], &w, 16);
                }
            }
            for (int t = static_cast<int>(blockIdx.x); t < F::kDnTiles; t += static_cast<int>(G), ++it) {
                const int slot = static_cast<int>(it % kSlots);
                mbar_wait(&sm.full[slot], (it / kSlots) & 1);
                const uint8_t* tile = sm.ring[slot];
                const uint8_t* sc = tile + F::kDnRows * F::qbytes(kI);
#pragma unroll
                for (int r = 0; r < F::kDnRows; ++r) {
                    float a = 0.f;
                    if (c.math) {
                        const uint8_t* row = tile + r * F::qbytes(kI);
#pragma unroll
                        for (int i = 0; i < F::kDnLaneVecs; ++i) {
                            const int lv = lane + 32 * i;
                            if (lv < F::kDnSlice) {
                                const int v = F::kDnSlice * warp + lv;
                                a += scale_at<FP8>(sc, r * (kI / 128) + v / F::kVecsPerGroup) *
                                     dot_vec<FP8>(*reinterpret_cast<const uint4*>(row + 16 * v), x[i]);
                            }
                        }
                        a = warp_sum(a);
                    }
                    if (lane == 0) sm.red[rbuf][r][warp] = a;
                }
                __syncwarp();
                if (lane == 0) mbar_arrive(&sm.empty[slot]);
                consumers_sync();
                if (ct < F::kDnRows) {
                    float y = 0.f;
#pragma unroll
                    for (int w = 0; w < kConsumerWarps; ++w) y += sm.red[rbuf][ct][w];
                    float* dst = c.res + t * F::kDnRows + ct;
                    __stcg(dst, __ldcg(dst) + y);
                }
                rbuf ^= 1;
            }
        }
        consumers_sync();  // every consumer's writes of the stage are issued
        // Arrive (a one-stage launch has nobody waiting on it: the launch order is its barrier).
        if (ct == 0 && c.s1 - c.s0 > 1) {
            __threadfence();
            red_release(&c.cnt[s], 1);
        }
    }
#endif
}

// ---- host side ----

using grimoire::bench::dalloc;

// Random codes and scales in the probe's layout, on the device: codes from random_bits (FP8: every byte
// finite, |w| < 2), then each row's scales overwritten with values in [lo, 3 lo): large enough that two
// layers move the residual by O(10), so the check below sees every row.
template <bool FP8>
__global__ void fill_scales_kernel(uint8_t* w, int rows, int K, int tiles, uint64_t seed, float lo) {
    using F = Fmt<FP8>;
    const int64_t per_tile = static_cast<int64_t>(rows) * (K / 128);
    const int64_t n = per_tile * tiles;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = i / per_tile, j = i % per_tile;
        uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const float s = lo + 2.f * lo * static_cast<float>(z >> 40) / static_cast<float>(1ull << 24);
        uint8_t* block = w + t * rows * F::row_bytes(K) + static_cast<int64_t>(rows) * F::qbytes(K);
        if constexpr (FP8)
            reinterpret_cast<float*>(block)[j] = s;
        else
            reinterpret_cast<__half*>(block)[j] = __float2half_rn(s);
    }
}

template <bool FP8>
void fill_weights(uint8_t* w, int rows, int K, int tiles, uint64_t seed) {
    const size_t bytes = static_cast<size_t>(tiles) * rows * Fmt<FP8>::row_bytes(K);
    gc::random_bits(reinterpret_cast<uint32_t*>(w), static_cast<int64_t>(bytes / 4), seed,
                    FP8 ? 0xBFBFBFBFu : 0xFFFFFFFFu, nullptr);
    fill_scales_kernel<FP8><<<1024, 256>>>(w, rows, K, tiles, seed + 7, FP8 ? 0.02f : 0.003f);
    check(cudaGetLastError(), "fill_scales");
}

// The weight of channel k of a row in the probe's layout, for the host reference.
template <bool FP8>
double code_value(const uint8_t* row, int k) {
    if constexpr (FP8) {
        return grimoire::fp8_e4m3_to_f32(row[k]);
    } else {
        const int v = k / 32, j = (k % 32) / 8, e = k % 8;
        uint32_t word;
        std::memcpy(&word, row + 16 * v + 4 * j, 4);
        return static_cast<int>((word >> (4 * ((e & 1) * 4 + (e >> 1)))) & 15u) - 8;
    }
}
float half_round(float v) {
    return __half2float(__float2half_rn(v));
}
template <bool FP8>
double row_dot(const uint8_t* tile, int rows, int K, int r, const std::vector<float>& x) {
    using F = Fmt<FP8>;
    const uint8_t* row = tile + static_cast<size_t>(r) * F::qbytes(K);
    const uint8_t* sc =
        tile + static_cast<size_t>(rows) * F::qbytes(K) + static_cast<size_t>(r) * (K / 128) * F::kScaleBytes;
    double acc = 0;
    for (int g = 0; g < K / 128; ++g) {
        double a = 0;
        for (int k = 128 * g; k < 128 * (g + 1); ++k)
            a += code_value<FP8>(row, k) * static_cast<double>(x[k]);
        float s;
        if constexpr (FP8) {
            std::memcpy(&s, sc + 4 * g, 4);
        } else {
            __half h;
            std::memcpy(&h, sc + 2 * g, 2);
            s = __half2float(h);
        }
        acc += a * s;
    }
    return acc;
}
// One layer of the chain on the host: the device's rounding points (xn and h to half), double sums.
template <bool FP8>
void host_layer(std::vector<float>& res,
                const std::vector<float>& wn,
                const std::vector<uint8_t>& gu,
                const std::vector<uint8_t>& dn) {
    using F = Fmt<FP8>;
    double ss = 0;
    for (float v : res) ss += static_cast<double>(v) * v;
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / kD) + kEps);
    std::vector<float> xn(kD), h(kI);
    for (int k = 0; k < kD; ++k) xn[k] = half_round(res[k] * inv * wn[k]);
    for (int p = 0; p < kI; ++p) {
        const uint8_t* tile = gu.data() + static_cast<size_t>(p / F::kGuPairs) * F::kGuTileBytes;
        const double g = row_dot<FP8>(tile, F::kGuRows, kD, p % F::kGuPairs, xn);
        const double u = row_dot<FP8>(tile, F::kGuRows, kD, p % F::kGuPairs + F::kGuPairs, xn);
        h[p] = half_round(static_cast<float>(g / (1.0 + std::exp(-g)) * u));
    }
    for (int j = 0; j < kD; ++j) {
        const uint8_t* tile = dn.data() + static_cast<size_t>(j / F::kDnRows) * F::kDnTileBytes;
        res[j] += static_cast<float>(row_dot<FP8>(tile, F::kDnRows, kI, j % F::kDnRows, h));
    }
}
// The state stage on the host (state_stage's math in double; S [kHeads][kHead][kHead]).
void host_state(std::vector<float>& res, std::vector<double>& S) {
    for (int b = 0; b < kHeads; ++b) {
        double n2 = 0;
        for (int i = 0; i < kHead; ++i) n2 += static_cast<double>(res[kHead * b + i]) * res[kHead * b + i];
        const double inv = 1.0 / std::sqrt(n2 + 1e-12);
        std::vector<double> k(kHead);
        for (int i = 0; i < kHead; ++i) k[i] = res[kHead * b + i] * inv;
        for (int i = 0; i < kHead; ++i) {
            double o = 0;
            for (int j = 0; j < kHead; ++j) {
                double& v = S[(static_cast<size_t>(b) * kHead + i) * kHead + j];
                v = 0.9 * v + k[i] * k[j];
                o += v * k[j];
            }
            res[kHead * b + i] = static_cast<float>(res[kHead * b + i] + 0.5 * o);
        }
    }
}

template <bool FP8>
struct Probe {
    using F = Fmt<FP8>;
    int layers = 16;
    int sms = 0;
    size_t smem = sizeof(Smem);
    uint8_t *gu = nullptr, *dn = nullptr;
    float *wn = nullptr, *res = nullptr, *state = nullptr;
    __half* h = nullptr;
    int per_layer = 2;  // 3: with the state stage
    unsigned* cnt = nullptr;
    unsigned epoch = 0;
    std::vector<float> res0;

    void reset_res() { check(cudaMemcpy(res, res0.data(), kD * 4, cudaMemcpyHostToDevice), "res"); }
    void reset_counters() {
        check(cudaMemset(cnt, 0, 3 * static_cast<size_t>(layers) * 4), "cnt");
        epoch = 0;
    }
    Chain chain(int s0, int s1, int across, int math, int pdl = 0) const {
        Chain c;
        c.pdl = pdl;
        c.gu = gu, c.dn = dn, c.wn = wn, c.res = res, c.h = h, c.state = state, c.cnt = cnt, c.epoch = epoch;
        c.per_layer = per_layer;
        c.s0 = s0, c.s1 = s1, c.across = across, c.math = math;
        return c;
    }
    // The whole chain of `n` layers in one cooperative launch.
    void persist(int n, int across, int math, cudaStream_t s) {
        Chain c = chain(0, per_layer * n, across, math);
        void* args[] = {&c};
        check(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(chain_kernel<FP8>),
                                          dim3(static_cast<unsigned>(sms)), dim3(kThreads), args, smem, s),
              "cooperative launch");
        ++epoch;
    }
    // One launch per stage (a stage's blocks wait on nothing but the launch order); with `pdl` each is a
    // programmatic launch whose producer streams before the previous stage has finished.
    void stages(int n, int math, cudaStream_t s, bool pdl = false) const {
        for (int st = 0; st < per_layer * n; ++st)
            gc::launch_pdl_if(pdl, chain_kernel<FP8>, dim3(static_cast<unsigned>(sms)), dim3(kThreads), smem,
                              s, chain(st, st + 1, 1, math, pdl ? 1 : 0));
    }
    // One plain launch per layer, its stages behind grid barriers: what fits the engine's kernel-per-block
    // step. The counters are zeroed first (a graph replays the same epoch); one block per SM and nothing
    // before it still running (plain launches on one stream) keep the grid co-resident.
    void layer_launches(int n, cudaStream_t s) const {
        check(cudaMemsetAsync(cnt, 0, 3 * static_cast<size_t>(layers) * 4, s), "cnt");
        Probe q = *this;
        q.epoch = 0;
        for (int l = 0; l < n; ++l)
            chain_kernel<FP8><<<static_cast<unsigned>(sms), kThreads, smem, s>>>(
                q.chain(per_layer * l, per_layer * (l + 1), 1, 1));
    }
};

// The library's MLP chain on the same shapes, per layer as the decode step runs it (random codes and scales,
// BF16 activations): add_rmsnorm, the stacked gate | up (INT4: glu parts, h straight from the kernel; FP8 one
// row keeps two parts and silu_mul, as qmm_glu_ok says), down. Mean ms a layer.
// fused (FP8) > 0: gate | up, silu_mul and down as the one persistent launch of cuda::mlp_fp8 (what the decode
// step runs for one row with GRIMOIRE_MLP_FUSED=1), over the same random codes taken as n-tile-major (the order
// it reads; the bytes are random either way): 1 as the library launches it, 2 without its math (its loads'
// floor), 3..5 with down's L2 prefetch ahead of the ring at 256, 128 and 384 KB a block (the default is
// mlp_fp8.cu's); 6 the fused launches back to back without the norm; 7 without scale loads (wrong results); 8
// with the norm in the block's launch (MlpPreNorm), as the decode step runs it with GRIMOIRE_MLP_FUSED=1 and
// GRIMOIRE_MLP_FUSED_NORM=1; 9 that with gate | up kNtMajor instead of kNtMajorPaired (GRIMOIRE_MLP_PAIRED=0: its
// pairs read from two places). With fused, one more traced launch prints where a block's time goes (mlp_fp8.cu's marks).
template <bool FP8>
double library_chain_ms(int L, int fused = 0) {
    std::vector<void*> bufs;
    auto alloc = [&bufs](size_t n) {
        void* p = dalloc(n);
        bufs.push_back(p);
        return p;
    };
    // Copy l of each: layer l's stacked gate | up [2 I, D] and down [D, I].
    grimoire::bench::QWeights gu, dn;
    grimoire::bench::make_weights(gu, FP8, 2 * kI, kD, L, 5000);
    grimoire::bench::make_weights(dn, FP8, kD, kI, L, 6000);
    if (fused > 0) {
        for (auto& w : gu.f8) w.tile_order = fused == 9 ? grimoire::kNtMajor : grimoire::kNtMajorPaired;
        for (auto& w : dn.f8) w.tile_order = grimoire::kNtMajor;
    }
    size_t pb1 = 0, pb2 = 0;
    int nc1 = 0, nc2 = 0;
    gc::qmm_workspace_need(2 * kI, kD, &pb1, &nc1);
    gc::qmm_workspace_need(kD, kI, &pb2, &nc2);
    gc::QmmWorkspace ws;
    size_t pb3 = 0;
    int nc3 = 0;
    gc::mlp_fp8_workspace_need(kD, kI, &pb3, &nc3);
    ws.partial_bytes = std::max({pb1, pb2, pb3, size_t{4} << 20}), ws.n_counters = std::max({nc1, nc2, nc3});
    ws.partials = static_cast<float*>(alloc(ws.partial_bytes));
    ws.counters = static_cast<int*>(alloc(static_cast<size_t>(ws.n_counters) * 4));
    check(cudaMemset(ws.counters, 0, static_cast<size_t>(ws.n_counters) * 4), "counters");
    auto* lres = static_cast<uint16_t*>(alloc(kD * 2));
    auto* ly = static_cast<uint16_t*>(alloc(kD * 2));
    auto* lxn = static_cast<uint16_t*>(alloc(kD * 2));
    auto* lgu = static_cast<uint16_t*>(alloc(2 * kI * 2));
    auto* lh = static_cast<uint16_t*>(alloc(kI * 2));
    auto* lwn = static_cast<uint16_t*>(alloc(kD * 2));
    gc::random_fill(lres, DType::BF16, kD, 31, 1.f, 0.f, nullptr);
    gc::random_fill(ly, DType::BF16, kD, 32, 0.01f, 0.f, nullptr);
    gc::random_fill(lwn, DType::BF16, kD, 33, 0.5f, 1.f, nullptr);
    auto* lwnf = static_cast<float*>(alloc(kD * 4));  // the same kind of weight in f32 (MlpPreNorm's)
    gc::random_fill(lwnf, DType::F32, kD, 33, 0.5f, 1.f, nullptr);
    check(cudaDeviceSynchronize(), "library buffers");
    const auto dev = grimoire::Device::CUDA;
    Tensor tres(lres, DType::BF16, dev, {1, kD}), ty(ly, DType::BF16, dev, {1, kD});
    Tensor txn(lxn, DType::BF16, dev, {1, kD}), th(lh, DType::BF16, dev, {1, kI}),
        twn(lwn, DType::BF16, dev, {kD});
    Tensor tgu(lgu, DType::BF16, dev, {1, 2 * kI});
    Tensor tgate(lgu, DType::BF16, dev, {1, kI}), tup(lgu + kI, DType::BF16, dev, {1, kI});
    gc::QmmParts parts;
    parts.n = 1, parts.glu = 1, parts.col[0] = 0, parts.col[1] = 2 * kI, parts.data[0] = lh;
    const bool glu = gc::qmm_glu_ok(FP8, false, 1, 2 * kI, kD, 128, kD / 128);
    const bool ahead = gc::pdl_ahead_enabled();
    const double ms = grimoire::bench::time_graph_ms(
        [&](int i, cudaStream_t s) {
            const size_t l = static_cast<size_t>(i % L);
            if (FP8 && fused == 6) {  // the fused block alone, launch after launch (no norm between)
                gc::mlp_fp8(gu.f8[l], dn.f8[l], txn, th, ty, ws, s);
                return;
            }
            if (FP8 && (fused == 8 || fused == 9)) {  // the norm in the block's launch (MlpPreNorm)
                gc::MlpPreNorm pre;
                pre.res = tres, pre.y = ty, pre.w = lwnf, pre.eps = kEps;
                gc::mlp_fp8(gu.f8[l], dn.f8[l], Tensor{}, th, ty, ws, s, &pre);
                return;
            }
            gc::add_rmsnorm(tres, ty, twn, kEps, grimoire::NormKind::PLAIN, txn, s, ahead);
            if constexpr (FP8) {
                if (fused == 1) {
                    gc::mlp_fp8(gu.f8[l], dn.f8[l], txn, th, ty, ws, s);
                    return;
                }
                if (fused >= 2) {  // 2: no math; 3, 4, 5: down's L2 prefetch at 256, 128, 384 KB; 7: no scale loads
                    const int pf[8] = {-1, -1, -1, 256, 128, 384, -1, -1};
                    gc::mlp_fp8_variant(gu.f8[l], dn.f8[l], txn, th, ty, ws, s, fused == 2 ? 0 : fused == 7 ? 2 : 1, nullptr,
                                        pf[fused]);
                    return;
                }
                gc::qmm_fp8(gu.f8[l], txn, tgu, ws, s);
                gc::silu_mul(tgate, tup, th, s);
                gc::qmm_fp8(dn.f8[l], th, ty, ws, s);
            } else {
                if (glu) {
                    gc::qmm_int4(gu.i4[l], txn, tgu, ws, s, 0, &parts);
                } else {
                    gc::qmm_int4(gu.i4[l], txn, tgu, ws, s);
                    gc::silu_mul(tgate, tup, th, s);
                }
                gc::qmm_int4(dn.i4[l], th, ty, ws, s);
            }
        },
        2 * L);
    if constexpr (FP8) {
        if (fused == 1) {
            // Two traced layers after the timed ones (add_rmsnorm then the block, twice, on one stream as the graph
            // orders them): per mark, mean and max over blocks (us), both from the first launch's first block.
            int sms = 0;
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
            constexpr int P = 9;
            const size_t n = static_cast<size_t>(sms) * P;
            auto* tr = static_cast<unsigned long long*>(alloc(2 * n * 8));
            check(cudaMemset(tr, 0, 2 * n * 8), "trace");
            cudaStream_t ts = nullptr;
            check(cudaStreamCreate(&ts), "stream");
            for (int k = 0; k < 2; ++k) {
                gc::add_rmsnorm(tres, ty, twn, kEps, grimoire::NormKind::PLAIN, txn, ts, ahead);
                gc::mlp_fp8_variant(gu.f8[k], dn.f8[k], txn, th, ty, ws, ts, 1, tr + k * n);
            }
            check(cudaStreamSynchronize(ts), "traced launch");
            cudaStreamDestroy(ts);
            std::vector<unsigned long long> h(2 * n);
            check(cudaMemcpy(h.data(), tr, h.size() * 8, cudaMemcpyDeviceToHost), "trace");
            unsigned long long t0 = ~0ull;
            for (int b = 0; b < sms; ++b) t0 = std::min(t0, h[static_cast<size_t>(b) * P]);
            const char* names[P] = {"start", "x staged", "A tiles", "A stored", "barrier", "h loaded", "h staged",
                                    "B tiles", "B stored"};
            for (int k = 0; k < 2; ++k)
                for (int i = 0; i < P; ++i) {
                    double mean = 0, mn = 1e30, mx = 0;
                    for (int b = 0; b < sms; ++b) {
                        const double v =
                            static_cast<double>(h[k * n + static_cast<size_t>(b) * P + i] - t0) * 1e-3;
                        mean += v / sms, mn = std::min(mn, v), mx = std::max(mx, v);
                    }
                    std::printf("fp8 fused trace %d %-9s mean %7.2f us  min %7.2f us  max %7.2f us\n", k + 1,
                                names[i], mean, mn, mx);
                }
        }
    }
    for (void* p : bufs) cudaFree(p);
    return ms;
}

// What a grid barrier of the persistent form costs against a kernel boundary: `n` arrive / wait rounds of
// the same counters (one block per SM, nothing else to do), and `n` empty launches of the same grid replayed
// from a graph. Mean us each.
__global__ void barrier_kernel(unsigned* cnt, int n) {
    if (threadIdx.x == 0) {
        for (int i = 0; i < n; ++i) {
            red_release(&cnt[i], 1);
            wait_count(&cnt[i], gridDim.x);
        }
    }
    __syncthreads();
}
__global__ void empty_kernel() {}

void barrier_costs(int sms, std::string& metrics) {
    constexpr int n = 256;
    auto* cnt = static_cast<unsigned*>(dalloc(n * 4));
    const double b = grimoire::bench::time_ms(
        [&](int) {
            cudaMemsetAsync(cnt, 0, n * 4);
            void* args[] = {&cnt, const_cast<int*>(&n)};
            check(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(barrier_kernel),
                                              dim3(static_cast<unsigned>(sms)), dim3(kThreads), args, 0,
                                              nullptr),
                  "barrier launch");
        },
        10);
    const double e = grimoire::bench::time_graph_ms(
        [&](int, cudaStream_t s) { empty_kernel<<<static_cast<unsigned>(sms), kThreads, 0, s>>>(); }, n);
    cudaFree(cnt);
    std::printf("grid barrier %.2f us (rounds of %d, with the launch), empty launch in a graph %.2f us\n",
                b * 1e3 / n, n, e * 1e3);
    grimoire::bench::add_entry(metrics, "grid_barrier_us", b * 1e3 / n);
    grimoire::bench::add_entry(metrics, "empty_launch_us", e * 1e3);
}

// Checks, then times every form of one format; appends "<fmt>_<form>_us_per_layer" to metrics and
// "<fmt>_<form>_bw" (of copy) and the comparisons to ratios. False when the check failed.
template <bool FP8>
bool run_format(int L, int sms, double bw, std::string& metrics, std::string& ratios) {
    using F = Fmt<FP8>;
    const std::string fmt = FP8 ? "fp8" : "int4";
    Probe<FP8> p;
    p.layers = L, p.sms = sms;
    check(cudaFuncSetAttribute(chain_kernel<FP8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(p.smem)),
          "smem attribute");
    int per_sm = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, chain_kernel<FP8>, kThreads, p.smem),
          "occupancy");
    if (per_sm < 1) throw grimoire::Error("the chain kernel does not fit an SM");
    std::printf("== %s: %zu bytes of shared memory a block, %d layers, %.1f MB a layer (%.1f us at copy)\n",
                fmt.c_str(), p.smem, L, static_cast<double>(F::kGuBytes + F::kDnBytes) / 1e6,
                static_cast<double>(F::kGuBytes + F::kDnBytes) / bw * 1e6);
    std::vector<void*> bufs;
    auto alloc = [&bufs](size_t n) {
        void* q = dalloc(n);
        bufs.push_back(q);
        return q;
    };
    p.gu = static_cast<uint8_t*>(alloc(F::kGuBytes * L));
    p.dn = static_cast<uint8_t*>(alloc(F::kDnBytes * L));
    p.wn = static_cast<float*>(alloc(static_cast<size_t>(L) * kD * 4));
    p.res = static_cast<float*>(alloc(kD * 4));
    p.h = static_cast<__half*>(alloc(kI * 2));
    p.cnt = static_cast<unsigned*>(alloc(3 * static_cast<size_t>(L) * 4));
    const size_t state_bytes = static_cast<size_t>(kHeads) * kHead * kHead * 4;
    p.state = static_cast<float*>(alloc(state_bytes));
    for (int l = 0; l < L; ++l) {
        fill_weights<FP8>(p.gu + F::kGuBytes * l, F::kGuRows, kD, F::kGuTiles, 1000 + 2 * l);
        fill_weights<FP8>(p.dn + F::kDnBytes * l, F::kDnRows, kI, F::kDnTiles, 1001 + 2 * l);
    }
    std::vector<float> wn_h(static_cast<size_t>(L) * kD);
    p.res0.resize(kD);
    uint64_t z = 12345;
    auto uni = [&z] {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<float>(z >> 40) / static_cast<float>(1ull << 24);
    };
    for (float& v : wn_h) v = 0.5f + uni();
    for (float& v : p.res0) v = 2.f * uni() - 1.f;
    check(cudaMemcpy(p.wn, wn_h.data(), wn_h.size() * 4, cudaMemcpyHostToDevice), "wn");
    check(cudaDeviceSynchronize(), "fill");

    // ---- correctness: two layers against the host; the per-stage and per-layer launches bit for bit ----
    std::vector<std::vector<uint8_t>> hgu(2, std::vector<uint8_t>(F::kGuBytes)),
        hdn(2, std::vector<uint8_t>(F::kDnBytes));
    for (int l = 0; l < 2; ++l) {
        check(cudaMemcpy(hgu[l].data(), p.gu + F::kGuBytes * l, F::kGuBytes, cudaMemcpyDeviceToHost), "gu");
        check(cudaMemcpy(hdn[l].data(), p.dn + F::kDnBytes * l, F::kDnBytes, cudaMemcpyDeviceToHost), "dn");
    }
    for (int per_layer : {2, 3}) {
        p.per_layer = per_layer;
        std::vector<float> dev(kD), dev_st(kD), dev_pdl(kD), dev_ly(kD);
        auto run = [&](std::vector<float>& outv, int form) {
            p.reset_res();
            p.reset_counters();
            check(cudaMemset(p.state, 0, state_bytes), "state");
            if (form == 0)
                p.persist(2, 1, 1, nullptr);
            else if (form == 1)
                p.stages(2, 1, nullptr);
            else if (form == 2)
                p.stages(2, 1, nullptr, true);
            else
                p.layer_launches(2, nullptr);
            check(cudaGetLastError(), "the chain's launches");
            check(cudaMemcpy(outv.data(), p.res, kD * 4, cudaMemcpyDeviceToHost),
                  "the chain (a trap here is a wait that timed out)");
        };
        run(dev, 0), run(dev_st, 1), run(dev_pdl, 2), run(dev_ly, 3);
        std::vector<float> ref = p.res0;
        std::vector<double> S(static_cast<size_t>(kHeads) * kHead * kHead, 0.0);
        for (int l = 0; l < 2; ++l) {
            host_layer<FP8>(ref, std::vector<float>(wn_h.begin() + l * kD, wn_h.begin() + (l + 1) * kD),
                            hgu[l], hdn[l]);
            if (per_layer == 3) host_state(ref, S);
        }
        // The half2 sums round each vector's 8-16 steps to 11 bits (~1e-3 of the vector's sum); 1e-2 of the
        // largest change is far inside that and far below what a wrong channel, row or scale gives (order 1).
        double max_delta = 0, max_err = 0;
        for (int j = 0; j < kD; ++j) {
            max_delta = std::max(max_delta, std::fabs(static_cast<double>(ref[j]) - p.res0[j]));
            max_err = std::max(max_err, std::fabs(static_cast<double>(dev[j]) - ref[j]));
        }
        const bool same = std::memcmp(dev.data(), dev_st.data(), kD * 4) == 0 &&
                          std::memcmp(dev.data(), dev_pdl.data(), kD * 4) == 0 &&
                          std::memcmp(dev.data(), dev_ly.data(), kD * 4) == 0;
        const bool ok = max_err <= 1e-2 * max_delta + 1e-5 && max_delta > 1e-3 && same;
        std::printf(
            "%s check (2 layers, %d stages a layer): max |res - host| %.3g of max change %.3g; per-stage "
            "and per-layer == persistent: %s -> %s\n",
            fmt.c_str(), per_layer, max_err, max_delta, same ? "yes" : "NO", ok ? "ok" : "FAILED");
        if (!ok) return false;
    }

    // ---- timing ----
    const double layer_bytes = static_cast<double>(F::kGuBytes + F::kDnBytes);
    auto record = [&](const char* name, double ms_per_layer) {
        const double ratio = layer_bytes / (ms_per_layer * 1e-3) / bw;
        std::printf("%s %-24s %8.2f us a layer  %.3f of copy\n", fmt.c_str(), name, ms_per_layer * 1e3,
                    ratio);
        grimoire::bench::add_entry(metrics, fmt + "_" + name + "_us_per_layer", ms_per_layer * 1e3);
        grimoire::bench::add_entry(ratios, fmt + "_" + name + "_bw", ratio);
        return ms_per_layer;
    };
    using grimoire::bench::time_graph_ms;
    using grimoire::bench::time_ms;
    double t[2][4] = {};  // [state][persist, noacross, stages, layer]
    for (int st = 0; st < (g_fused_only ? 0 : 2); ++st) {
        p.per_layer = 2 + st;
        p.reset_res();
        p.reset_counters();
        const std::string pre = st ? "state_" : "";
        t[st][0] =
            record((pre + "persist").c_str(), time_ms([&](int) { p.persist(L, 1, 1, nullptr); }, 10) / L);
        t[st][1] = record((pre + "persist_noacross").c_str(),
                          time_ms([&](int) { p.persist(L, 0, 1, nullptr); }, 10) / L);
        if (!st) record("persist_loads", time_ms([&](int) { p.persist(L, 1, 0, nullptr); }, 10) / L);
        t[st][2] = record((pre + "stages").c_str(),
                          time_graph_ms([&](int, cudaStream_t s) { p.stages(L, 1, s); }, 2) / L);
        record((pre + "stages_pdl").c_str(),
               time_graph_ms([&](int, cudaStream_t s) { p.stages(L, 1, s, true); }, 2) / L);
        t[st][3] = record((pre + "layer").c_str(),
                          time_graph_ms([&](int, cudaStream_t s) { p.layer_launches(L, s); }, 2) / L);
    }
    for (void* q : bufs) cudaFree(q);
    const double t_lib = record("library", library_chain_ms<FP8>(L));
    if constexpr (FP8) {
        const double t_fused = record("library_fused", library_chain_ms<FP8>(L, 1));
        record("library_fused_loads", library_chain_ms<FP8>(L, 2));
        record("library_fused_pf256", library_chain_ms<FP8>(L, 3));
        record("library_fused_pf128", library_chain_ms<FP8>(L, 4));
        record("library_fused_pf384", library_chain_ms<FP8>(L, 5));
        record("library_fused_alone", library_chain_ms<FP8>(L, 6));
        record("library_fused_noscale", library_chain_ms<FP8>(L, 7));
        const double t_norm = record("library_fused_norm", library_chain_ms<FP8>(L, 8));
        record("library_fused_norm_unpaired", library_chain_ms<FP8>(L, 9));
        grimoire::bench::add_entry(ratios, fmt + "_fused_norm_over_library", t_norm / t_lib);
        grimoire::bench::add_entry(ratios, fmt + "_fused_over_library", t_fused / t_lib);
        if (!g_fused_only) grimoire::bench::add_entry(ratios, fmt + "_fused_over_persist", t_fused / t[0][0]);
    }
    if (g_fused_only) return true;
    grimoire::bench::add_entry(ratios, fmt + "_persist_over_library", t[0][0] / t_lib);
    grimoire::bench::add_entry(ratios, fmt + "_layer_over_library", t[0][3] / t_lib);
    grimoire::bench::add_entry(ratios, fmt + "_persist_over_stages", t[0][0] / t[0][2]);
    grimoire::bench::add_entry(ratios, fmt + "_noacross_over_persist", t[0][1] / t[0][0]);
    grimoire::bench::add_entry(ratios, fmt + "_state_persist_over_stages", t[1][0] / t[1][2]);
    grimoire::bench::add_entry(ratios, fmt + "_state_layer_over_stages", t[1][3] / t[1][2]);
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    std::string out, commit = "unknown", only;
    int layers = 16;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--layers" && i + 1 < argc)
            layers = std::max(2, std::atoi(argv[++i]));
        else if (a == "--only" && i + 1 < argc)
            only = argv[++i];
        else if (a == "--out" && i + 1 < argc)
            out = argv[++i];
        else if (a == "--commit" && i + 1 < argc)
            commit = argv[++i];
        else if (a == "--fused-only")
            g_fused_only = true;
        else {
            std::fprintf(stderr,
                         "usage: probe_decode_chain [--layers L] [--only int4|fp8] [--fused-only] "
                         "[--out results.json] [--commit SHA]\n");
            return 2;
        }
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach a log even if the run is cut off
    try {
        cudaDeviceProp prop{};
        check(cudaGetDeviceProperties(&prop, 0), "device");
        const double bw = grimoire::bench::copy_bandwidth();
        std::printf("%s: %d SMs; copy %.0f GB/s\n", prop.name, prop.multiProcessorCount, bw / 1e9);
        std::string metrics, ratios;
        barrier_costs(prop.multiProcessorCount, metrics);
        bool ok = true;
        if (only.empty() || only == "int4")
            ok = run_format<false>(layers, prop.multiProcessorCount, bw, metrics, ratios) && ok;
        if (only.empty() || only == "fp8")
            ok = run_format<true>(layers, prop.multiProcessorCount, bw, metrics, ratios) && ok;
        if (!out.empty()) {
            std::string cmd = "probe_decode_chain --layers " + std::to_string(layers) +
                              (only.empty() ? "" : " --only " + only) + (g_fused_only ? " --fused-only" : "");
            grimoire::bench::write_record_text(out, commit, cmd, bw, metrics, ratios);
            std::printf("wrote %s\n", out.c_str());
        }
        return ok ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "probe_decode_chain: %s\n", e.what());
        return 1;
    }
}
