// Probe (bench only) for the decode target of issue 5: can ONE persistent kernel that streams a decode
// chain's weights straight across its dependent one-row projections keep HBM busy where one launch per op
// does not? Sessions 18-25 (docs/BENCHMARKS.md) found the quantized linears at ~0.79 of copy inside the step
// and ~450 small launches costing 0.6-0.8 ms more: the per-launch ramp and tail, and the stall of the weight
// stream at every small op. A weight never depends on the activations, so a kernel that owns every SM for the
// whole chain can keep loading the next projection's weights while the current one's last rows, the grid
// barrier and the next small op (here the RMSNorm) run.
//
// The chain is the 27B MLP, L layers of: xn = rmsnorm(res) * wn; h = silu(W_gate xn) * (W_up xn) (5120 ->
// 2 x 17408); res += W_down h (17408 -> 5120); INT4 symmetric group 128, F16 scales, one row. Forms timed on
// the same chain (same bytes per layer):
// - persist: one cooperative launch for all 2 L stages, one block per SM. A producer warp streams the
//   block's tiles of every stage in order into a 4 x 48 KB shared ring by bulk async copies (mbarrier
//   completion) and never waits on the grid; 8 consumer warps wait at a grid barrier per stage (arrival
//   counters) for the stage's input, then take the tiles from the ring.
// - persist_noacross: the same, but the producer also waits for the previous stage before streaming a
//   stage's tiles (what persistence alone buys, without streaming across the dependency).
// - persist_loads: persist with the consumers taking the tiles without computing (the streaming bound).
// - stages: the same kernel launched once per stage, 2 L plain launches replayed from a CUDA graph (the
//   kernel-per-op form of the same code).
// - library: the library's chain on the same shapes as the decode step runs it: add_rmsnorm, qmm_int4 of
//   the stacked gate | up with glu parts, qmm_int4 of down (graph, programmatic launches).
// - state_*: persist, persist_noacross and stages with a third stage a layer after down, a stand-in for the
//   Gated DeltaNet step: 40 blocks read and write 64 KB states while the other SMs have nothing to compute
//   (state_stage below). Its 5 MB of state traffic a layer is not in the ratios.
// The probe's weight layout (a tile = R whole rows, contiguous, then their scales) and its CUDA-core dot
// product (half2, exact codes) are its own: the library's tile layout and mma path are not reproduced. What
// it measures is the structure: persist against stages, persist_loads against copy.
//
// Checked first on 2-layer chains, with and without the state stage, against a host reference (double sums
// of the same half-rounded xn and h); the persistent and per-stage forms must agree bit for bit (same code,
// same order).
//
//   probe_decode_chain [--layers L] [--out results.json] [--commit SHA]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/quant_mma_tma.cuh"

namespace gc = grimoire::cuda;
namespace qmm = grimoire::cuda::qmm;
using grimoire::DType;
using grimoire::Tensor;
using grimoire::bench::check;

namespace {

constexpr int kConsumerWarps = 8;
constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp
constexpr int kSlots = 4;
constexpr int kSlotBytes = 48 * 1024;
constexpr int kD = 5120, kI = 17408;  // the 27B hidden and intermediate sizes
constexpr float kEps = 1e-6f;
constexpr int kHead = 128, kHeads = kD / kHead;  // the state stage: 40 heads of 128 over the residual

// A row of an [N, K] weight: K / 2 bytes of codes (16-byte vectors of 32 channels), then its K / 128 F16
// scales in the tile's scale block. Within a vector, word j (0..3) holds channels 8 j + e at nibble (e & 1) *
// 4 + (e >> 1), so one shift + mask + or of the word gives the half2 pair (channel 2 i, 2 i + 1) as 1024 + q.
__host__ __device__ constexpr int row_qbytes(int K) {
    return K / 2;
}
__host__ __device__ constexpr int row_groups(int K) {
    return K / 128;
}
__host__ __device__ constexpr int tile_bytes(int rows, int K) {
    return rows * (row_qbytes(K) + 2 * row_groups(K));
}

// gate | up: a tile is 8 gate rows then the 8 up rows of the same 8 outputs of h; down: 4 rows.
constexpr int kGuRows = 16, kGuPairs = kGuRows / 2;
constexpr int kDnRows = 4;
constexpr int kGuTileBytes = tile_bytes(kGuRows, kD);  // 42240
constexpr int kDnTileBytes = tile_bytes(kDnRows, kI);  // 35904
constexpr int kGuTiles = kI / kGuPairs;                // 2176
constexpr int kDnTiles = kD / kDnRows;                 // 1280
constexpr size_t kGuBytes = static_cast<size_t>(kGuTiles) * kGuTileBytes;
constexpr size_t kDnBytes = static_cast<size_t>(kDnTiles) * kDnTileBytes;
static_assert(kGuTileBytes <= kSlotBytes && kDnTileBytes <= kSlotBytes, "a tile fits a ring slot");
static_assert(kGuTileBytes % 16 == 0 && kDnTileBytes % 16 == 0, "bulk copies move 16-byte multiples");

// Consumer lanes and the channels they own. gate | up: each warp does two whole rows of a tile (gate w, up
// w), lane l the vectors l + 32 i (i < 5) of a row, so its 160 x values stay in registers for the stage.
// down: warp w owns vectors [68 w, 68 w + 68) of all 4 rows, lane l the vectors 68 w + l + 32 i where l + 32
// i < 68.
constexpr int kGuLaneVecs = kD / 32 / 32;           // 5
constexpr int kDnSlice = kI / 32 / kConsumerWarps;  // 68
constexpr int kDnLaneVecs = (kDnSlice + 31) / 32;   // 3
static_assert(kD / 32 % 32 == 0 && kI / 32 % kConsumerWarps == 0, "the lane split covers K exactly");

struct Chain {
    const uint8_t* gu = nullptr;  // [layers][kGuBytes]
    const uint8_t* dn = nullptr;  // [layers][kDnBytes]
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
};

constexpr uint64_t kTimeoutNs = 2000000000ull;  // a wait this long is a bug: trap instead of hanging the card
__device__ __forceinline__ uint64_t now_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using qmm::bulk_load;
using qmm::mbar_arrive;
using qmm::mbar_arrive_tx;
using qmm::mbar_init;
using qmm::smem_addr;
// quant_mma_tma.cuh's wait, bounded: a probe run blind must trap rather than hang the card.
__device__ __forceinline__ bool mbar_try(uint64_t* b, unsigned parity) {
    uint32_t ok;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(smem_addr(b)), "r"(parity)
        : "memory");
    return ok != 0;
}
__device__ void mbar_wait(uint64_t* b, unsigned parity) {
    if (mbar_try(b, parity)) return;
    const uint64_t t0 = now_ns();
    while (!mbar_try(b, parity))
        if (now_ns() - t0 > kTimeoutNs) __trap();
}
#endif
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release(unsigned* p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ void wait_count(const unsigned* p, unsigned target) {
    if (ld_acquire(p) >= target) return;
    const uint64_t t0 = now_ns();
    while (ld_acquire(p) < target)
        if (now_ns() - t0 > kTimeoutNs) __trap();
}
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32) : "memory");
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// sum over the vector's 32 channels of (q - 8) x, in half2 (the codes and q - 8 are exact in half; the
// products and adds round to 11 bits, over 16 steps of |term| <= 8 |x|), then widened.
__device__ __forceinline__ float dot_vec(const uint4 w, const half2* x) {
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
    const half2 bias = __float2half2_rn(1032.f);
    half2 acc = __float2half2_rn(0.f);
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
    return __low2float(acc) + __high2float(acc);
}

struct Smem {
    alignas(128) uint8_t ring[kSlots][kSlotBytes];
    half2 xs[kD / 2];                       // the stage's xn (gate | up), half
    float red[2][kDnRows][kConsumerWarps];  // down: per-warp partials, double-buffered by tile
    float ss[kConsumerWarps];
    float ss_k[128];  // the state stage's k
    uint64_t full[kSlots], empty[kSlots];
};

// The state stage, a stand-in for the Gated DeltaNet step between the projections (here 40 heads of 64 KB,
// read and written by 40 blocks, while the other SMs have nothing to compute): block b < kHeads takes k =
// res[128 b ..
// + 127] / |k|, S_b = 0.9 S_b + k k^T, res[128 b + i] += 0.01 (S_b k)_i. Each block touches only its own
// slice.
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
        if (lane == 0) __stcg(c.res + kHead * b + i, kv[i] + 0.01f * o);
    }
}

__global__ void __launch_bounds__(kThreads, 1) chain_kernel(Chain c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem_raw[];
    Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const unsigned G = gridDim.x, target = (c.epoch + 1) * G;
    if (threadIdx.x == 0) {
        for (int i = 0; i < kSlots; ++i) mbar_init(&sm.full[i], 1), mbar_init(&sm.empty[i], kConsumerWarps);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == kConsumerWarps) {  // producer: every stage's tiles of this block, in the consumers' order
        if (lane != 0) return;
        uint32_t it = 0;
        for (int s = c.s0; s < c.s1; ++s) {
            if (!c.across && s > c.s0) wait_count(&c.cnt[s - 1], target);
            const int kind = s % c.per_layer, layer = s / c.per_layer;
            if (kind == 2) continue;  // the state stage streams no weights
            const bool gu = kind == 0;
            const uint8_t* base = gu ? c.gu + static_cast<size_t>(layer) * kGuBytes
                                     : c.dn + static_cast<size_t>(layer) * kDnBytes;
            const int tiles = gu ? kGuTiles : kDnTiles, tb = gu ? kGuTileBytes : kDnTileBytes;
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
        }
        const int kind = s % c.per_layer, layer = s / c.per_layer;
        if (kind == 2) {
            if (blockIdx.x < kHeads) state_stage(c, sm, static_cast<int>(blockIdx.x), warp, lane, ct);
        } else if (kind == 0) {
            // xn = rmsnorm(res) * wn into shared memory (each thread 20 channels), then each lane's 160 into
            // registers.
            const float* wn = c.wn + static_cast<size_t>(layer) * kD;
            float4 r[kD / 4 / (kConsumerWarps * 32)];
            float ss = 0.f;
#pragma unroll
            for (int i = 0; i < kD / 4 / (kConsumerWarps * 32); ++i) {
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
            for (int i = 0; i < kD / 4 / (kConsumerWarps * 32); ++i) {
                const int q4 = ct + i * kConsumerWarps * 32;
                const float4 g = __ldg(reinterpret_cast<const float4*>(wn) + q4);
                sm.xs[2 * q4] = __floats2half2_rn(r[i].x * inv * g.x, r[i].y * inv * g.y);
                sm.xs[2 * q4 + 1] = __floats2half2_rn(r[i].z * inv * g.z, r[i].w * inv * g.w);
            }
            consumers_sync();
            half2 x[kGuLaneVecs][16];
#pragma unroll
            for (int i = 0; i < kGuLaneVecs; ++i)
#pragma unroll
                for (int p = 0; p < 16; ++p) x[i][p] = sm.xs[16 * (lane + 32 * i) + p];
            for (int t = static_cast<int>(blockIdx.x); t < kGuTiles; t += static_cast<int>(G), ++it) {
                const int slot = static_cast<int>(it % kSlots);
                mbar_wait(&sm.full[slot], (it / kSlots) & 1);
                float g = 0.f, u = 0.f;
                if (c.math) {
                    const uint8_t* tile = sm.ring[slot];
                    const uint8_t* sc = tile + kGuRows * row_qbytes(kD);
                    const uint8_t* rg = tile + warp * row_qbytes(kD);
                    const uint8_t* ru = tile + (warp + kGuPairs) * row_qbytes(kD);
                    const __half* sg = reinterpret_cast<const __half*>(sc) + warp * row_groups(kD);
                    const __half* su =
                        reinterpret_cast<const __half*>(sc) + (warp + kGuPairs) * row_groups(kD);
#pragma unroll
                    for (int i = 0; i < kGuLaneVecs; ++i) {
                        const int v = lane + 32 * i;
                        const uint4 wg = *reinterpret_cast<const uint4*>(rg + 16 * v);
                        const uint4 wu = *reinterpret_cast<const uint4*>(ru + 16 * v);
                        g += __half2float(sg[v / 4]) * dot_vec(wg, x[i]);
                        u += __half2float(su[v / 4]) * dot_vec(wu, x[i]);
                    }
                    g = warp_sum(g), u = warp_sum(u);
                }
                __syncwarp();
                if (lane == 0) {
                    mbar_arrive(&sm.empty[slot]);
                    __stcg(c.h + t * kGuPairs + warp, __float2half_rn(g / (1.f + __expf(-g)) * u));
                }
            }
        } else {
            // down: this lane's h channels straight into registers.
            half2 x[kDnLaneVecs][16];
#pragma unroll
            for (int i = 0; i < kDnLaneVecs; ++i) {
                const int lv = lane + 32 * i;
                const int v = kDnSlice * warp + (lv < kDnSlice ? lv : 0);
                const uint4* src = reinterpret_cast<const uint4*>(c.h + 32 * v);
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const uint4 w = __ldcg(src + q);
                    memcpy(&x[i][4 * q], &w, 16);
                }
            }
            for (int t = static_cast<int>(blockIdx.x); t < kDnTiles; t += static_cast<int>(G), ++it) {
                const int slot = static_cast<int>(it % kSlots);
                mbar_wait(&sm.full[slot], (it / kSlots) & 1);
                const uint8_t* tile = sm.ring[slot];
                const __half* sc = reinterpret_cast<const __half*>(tile + kDnRows * row_qbytes(kI));
#pragma unroll
                for (int r = 0; r < kDnRows; ++r) {
                    float a = 0.f;
                    if (c.math) {
                        const uint8_t* row = tile + r * row_qbytes(kI);
#pragma unroll
                        for (int i = 0; i < kDnLaneVecs; ++i) {
                            const int lv = lane + 32 * i;
                            if (lv < kDnSlice) {
                                const int v = kDnSlice * warp + lv;
                                a += __half2float(sc[r * row_groups(kI) + v / 4]) *
                                     dot_vec(*reinterpret_cast<const uint4*>(row + 16 * v), x[i]);
                            }
                        }
                        a = warp_sum(a);
                    }
                    if (lane == 0) sm.red[rbuf][r][warp] = a;
                }
                __syncwarp();
                if (lane == 0) mbar_arrive(&sm.empty[slot]);
                consumers_sync();
                if (ct < kDnRows) {
                    float y = 0.f;
#pragma unroll
                    for (int w = 0; w < kConsumerWarps; ++w) y += sm.red[rbuf][ct][w];
                    float* dst = c.res + t * kDnRows + ct;
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

void* dalloc(size_t n) {
    void* p = nullptr;
    check(cudaMalloc(&p, n ? n : 1), "cudaMalloc");
    return p;
}

// Random codes and scales in the probe's layout, on the device: codes from random_bits, then each row's
// scales overwritten with F16 values in [0.005, 0.015): large enough that two layers move the residual by
// O(10), so the check below sees every row.
__global__ void fill_scales_kernel(uint8_t* w, int rows, int K, int tiles, uint64_t seed) {
    const int64_t per_tile = static_cast<int64_t>(rows) * row_groups(K);
    const int64_t n = per_tile * tiles;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = i / per_tile, j = i % per_tile;
        uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const float s = 0.005f + 0.01f * static_cast<float>(z >> 40) / static_cast<float>(1ull << 24);
        __half* sc = reinterpret_cast<__half*>(w + t * tile_bytes(rows, K) +
                                               static_cast<int64_t>(rows) * row_qbytes(K));
        sc[j] = __float2half_rn(s);
    }
}

void fill_weights(uint8_t* w, int rows, int K, int tiles, uint64_t seed) {
    const size_t bytes = static_cast<size_t>(tiles) * tile_bytes(rows, K);
    gc::random_bits(reinterpret_cast<uint32_t*>(w), static_cast<int64_t>(bytes / 4), seed, 0xFFFFFFFFu,
                    nullptr);
    fill_scales_kernel<<<1024, 256>>>(w, rows, K, tiles, seed + 7);
    check(cudaGetLastError(), "fill_scales");
}

int nibble_code(const uint8_t* row, int k) {  // the probe's layout, for the host reference
    const int v = k / 32, j = (k % 32) / 8, e = k % 8;
    uint32_t word;
    std::memcpy(&word, row + 16 * v + 4 * j, 4);
    return static_cast<int>((word >> (4 * ((e & 1) * 4 + (e >> 1)))) & 15u);
}
float half_round(float v) {
    return __half2float(__float2half_rn(v));
}
float scale_of(const uint8_t* tile, int rows, int K, int r, int g) {
    __half h;
    std::memcpy(
        &h,
        tile + static_cast<size_t>(rows) * row_qbytes(K) + 2 * (static_cast<size_t>(r) * row_groups(K) + g),
        2);
    return __half2float(h);
}
double row_dot(const uint8_t* tile, int rows, int K, int r, const std::vector<float>& x) {
    const uint8_t* row = tile + static_cast<size_t>(r) * row_qbytes(K);
    double acc = 0;
    for (int g = 0; g < row_groups(K); ++g) {
        double a = 0;
        for (int k = 128 * g; k < 128 * (g + 1); ++k)
            a += (nibble_code(row, k) - 8) * static_cast<double>(x[k]);
        acc += a * scale_of(tile, rows, K, r, g);
    }
    return acc;
}
// One layer of the chain on the host: the device's rounding points (xn and h to half), double sums.
void host_layer(std::vector<float>& res,
                const std::vector<float>& wn,
                const std::vector<uint8_t>& gu,
                const std::vector<uint8_t>& dn) {
    double ss = 0;
    for (float v : res) ss += static_cast<double>(v) * v;
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / kD) + kEps);
    std::vector<float> xn(kD), h(kI);
    for (int k = 0; k < kD; ++k) xn[k] = half_round(res[k] * inv * wn[k]);
    for (int p = 0; p < kI; ++p) {
        const uint8_t* tile = gu.data() + static_cast<size_t>(p / kGuPairs) * kGuTileBytes;
        const double g = row_dot(tile, kGuRows, kD, p % kGuPairs, xn);
        const double u = row_dot(tile, kGuRows, kD, p % kGuPairs + kGuPairs, xn);
        h[p] = half_round(static_cast<float>(g / (1.0 + std::exp(-g)) * u));
    }
    for (int j = 0; j < kD; ++j) {
        const uint8_t* tile = dn.data() + static_cast<size_t>(j / kDnRows) * kDnTileBytes;
        res[j] += static_cast<float>(row_dot(tile, kDnRows, kI, j % kDnRows, h));
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
            res[kHead * b + i] = static_cast<float>(res[kHead * b + i] + 0.01 * o);
        }
    }
}

struct Probe {
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
    Chain chain(int s0, int s1, int across, int math) const {
        Chain c;
        c.gu = gu, c.dn = dn, c.wn = wn, c.res = res, c.h = h, c.state = state, c.cnt = cnt, c.epoch = epoch;
        c.per_layer = per_layer;
        c.s0 = s0, c.s1 = s1, c.across = across, c.math = math;
        return c;
    }
    // The whole chain of `n` layers in one cooperative launch.
    void persist(int n, int across, int math, cudaStream_t s) {
        Chain c = chain(0, per_layer * n, across, math);
        void* args[] = {&c};
        check(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(chain_kernel),
                                          dim3(static_cast<unsigned>(sms)), dim3(kThreads), args, smem, s),
              "cooperative launch");
        ++epoch;
    }
    // One plain launch per stage (a stage's blocks wait on nothing but the launch order).
    void stages(int n, int math, cudaStream_t s) const {
        for (int st = 0; st < per_layer * n; ++st)
            chain_kernel<<<static_cast<unsigned>(sms), kThreads, smem, s>>>(chain(st, st + 1, 1, math));
    }
};

}  // namespace

int main(int argc, char** argv) {
    std::string out, commit = "unknown";
    Probe p;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--layers" && i + 1 < argc)
            p.layers = std::max(2, std::atoi(argv[++i]));
        else if (a == "--out" && i + 1 < argc)
            out = argv[++i];
        else if (a == "--commit" && i + 1 < argc)
            commit = argv[++i];
        else {
            std::fprintf(stderr,
                         "usage: probe_decode_chain [--layers L] [--out results.json] [--commit SHA]\n");
            return 2;
        }
    }
    try {
        cudaDeviceProp prop{};
        check(cudaGetDeviceProperties(&prop, 0), "device");
        p.sms = prop.multiProcessorCount;
        check(cudaFuncSetAttribute(chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(p.smem)),
              "smem attribute");
        int per_sm = 0;
        check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, chain_kernel, kThreads, p.smem),
              "occupancy");
        if (per_sm < 1) throw grimoire::Error("the chain kernel does not fit an SM");
        std::printf("%s: %d SMs, %zu bytes of shared memory a block, %d layers (%.1f MB a layer)\n",
                    prop.name, p.sms, p.smem, p.layers, static_cast<double>(kGuBytes + kDnBytes) / 1e6);

        const int L = p.layers;
        p.gu = static_cast<uint8_t*>(dalloc(kGuBytes * L));
        p.dn = static_cast<uint8_t*>(dalloc(kDnBytes * L));
        p.wn = static_cast<float*>(dalloc(static_cast<size_t>(L) * kD * 4));
        p.res = static_cast<float*>(dalloc(kD * 4));
        p.h = static_cast<__half*>(dalloc(kI * 2));
        p.cnt = static_cast<unsigned*>(dalloc(3 * static_cast<size_t>(L) * 4));
        for (int l = 0; l < L; ++l) {
            fill_weights(p.gu + kGuBytes * l, kGuRows, kD, kGuTiles, 1000 + 2 * l);
            fill_weights(p.dn + kDnBytes * l, kDnRows, kI, kDnTiles, 1001 + 2 * l);
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

        p.state = static_cast<float*>(dalloc(static_cast<size_t>(kHeads) * kHead * kHead * 4));
        // ---- correctness: two layers against the host, and the per-stage launches bit for bit ----
        std::vector<std::vector<uint8_t>> hgu(2, std::vector<uint8_t>(kGuBytes)),
            hdn(2, std::vector<uint8_t>(kDnBytes));
        for (int l = 0; l < 2; ++l) {
            check(cudaMemcpy(hgu[l].data(), p.gu + kGuBytes * l, kGuBytes, cudaMemcpyDeviceToHost), "gu");
            check(cudaMemcpy(hdn[l].data(), p.dn + kDnBytes * l, kDnBytes, cudaMemcpyDeviceToHost), "dn");
        }
        const size_t state_bytes = static_cast<size_t>(kHeads) * kHead * kHead * 4;
        for (int per_layer : {2, 3}) {
            p.per_layer = per_layer;
            std::vector<float> dev(kD), dev_st(kD);
            p.reset_res();
            p.reset_counters();
            check(cudaMemset(p.state, 0, state_bytes), "state");
            p.persist(2, 1, 1, nullptr);
            check(cudaMemcpy(dev.data(), p.res, kD * 4, cudaMemcpyDeviceToHost),
                  "persistent chain (a trap here is a wait that timed out)");
            p.reset_res();
            check(cudaMemset(p.state, 0, state_bytes), "state");
            p.stages(2, 1, nullptr);
            check(cudaMemcpy(dev_st.data(), p.res, kD * 4, cudaMemcpyDeviceToHost), "per-stage chain");
            std::vector<float> ref = p.res0;
            std::vector<double> S(static_cast<size_t>(kHeads) * kHead * kHead, 0.0);
            for (int l = 0; l < 2; ++l) {
                host_layer(ref, std::vector<float>(wn_h.begin() + l * kD, wn_h.begin() + (l + 1) * kD),
                           hgu[l], hdn[l]);
                if (per_layer == 3) host_state(ref, S);
            }
            // The half2 sums round each 32-channel piece's 16 steps to 11 bits (~1e-3 of the piece); 1e-2 of
            // the largest change is far inside that and far below what a wrong channel, row or scale gives
            // (order 1).
            double max_delta = 0, max_err = 0;
            for (int j = 0; j < kD; ++j) {
                max_delta = std::max(max_delta, std::fabs(static_cast<double>(ref[j]) - p.res0[j]));
                max_err = std::max(max_err, std::fabs(static_cast<double>(dev[j]) - ref[j]));
            }
            const bool same = std::memcmp(dev.data(), dev_st.data(), kD * 4) == 0;
            const bool ok = max_err <= 1e-2 * max_delta + 1e-5 && max_delta > 1e-3 && same;
            std::printf(
                "check (2 layers, %d stages a layer): max |res - host| %.3g of max change %.3g; per-stage == "
                "persistent: %s -> %s\n",
                per_layer, max_err, max_delta, same ? "yes" : "NO", ok ? "ok" : "FAILED");
            if (!ok) return 1;
        }

        // ---- timing ----
        const double bw = grimoire::bench::copy_bandwidth();
        const double layer_bytes = static_cast<double>(kGuBytes + kDnBytes);
        std::string metrics, ratios;
        auto record = [&](const char* name, double ms_per_layer) {
            const double ratio = layer_bytes / (ms_per_layer * 1e-3) / bw;
            std::printf("%-18s %8.2f us a layer  %.3f of copy\n", name, ms_per_layer * 1e3, ratio);
            grimoire::bench::add_entry(metrics, std::string(name) + "_us_per_layer", ms_per_layer * 1e3);
            grimoire::bench::add_entry(ratios, std::string(name) + "_bw", ratio);
            return ms_per_layer;
        };
        p.reset_res();
        p.reset_counters();
        std::printf("copy %.0f GB/s; %.1f us a layer at copy\n", bw / 1e9, layer_bytes / bw * 1e6);
        const double t_p =
            record("persist", grimoire::bench::time_ms([&](int) { p.persist(L, 1, 1, nullptr); }, 10) / L);
        const double t_na = record(
            "persist_noacross", grimoire::bench::time_ms([&](int) { p.persist(L, 0, 1, nullptr); }, 10) / L);
        record("persist_loads", grimoire::bench::time_ms([&](int) { p.persist(L, 1, 0, nullptr); }, 10) / L);
        const double t_st = record(
            "stages", grimoire::bench::time_graph_ms([&](int, cudaStream_t s) { p.stages(L, 1, s); }, 2) / L);
        // With the state stage after each layer's down: the small op the other SMs' producers stream beside.
        p.per_layer = 3;
        p.reset_counters();
        const double t_ps = record(
            "state_persist", grimoire::bench::time_ms([&](int) { p.persist(L, 1, 1, nullptr); }, 10) / L);
        record("state_persist_noacross",
               grimoire::bench::time_ms([&](int) { p.persist(L, 0, 1, nullptr); }, 10) / L);
        const double t_sst =
            record("state_stages",
                   grimoire::bench::time_graph_ms([&](int, cudaStream_t s) { p.stages(L, 1, s); }, 2) / L);

        // The library's chain on the same shapes (its own tile layout, random codes, F16 scales, BF16
        // activations).
        std::vector<gc::Int4Dev> lgu(L), ldn(L);
        auto make = [](gc::Int4Dev& d, int64_t N, int64_t K, uint64_t seed) {
            d.N = N, d.K = K, d.NT = N / 16, d.KC = K / 64, d.G = K / 128, d.group_size = 128;
            d.scale_dtype = DType::F16;
            const size_t nw = static_cast<size_t>(d.NT * d.KC * 128),
                         ns = static_cast<size_t>(d.G * d.NT * 16);
            auto* w = static_cast<uint32_t*>(dalloc(nw * 4));
            void* sc = dalloc(ns * 2);
            gc::random_bits(w, static_cast<int64_t>(nw), seed, 0xFFFFFFFFu, nullptr);
            gc::random_fill(sc, DType::F16, static_cast<int64_t>(ns), seed + 1, 0.0005f, 0.0015f, nullptr);
            d.words = w, d.scales = sc;
        };
        for (int l = 0; l < L; ++l)
            make(lgu[l], 2 * kI, kD, 5000 + 4 * l), make(ldn[l], kD, kI, 5002 + 4 * l);
        size_t pb1 = 0, pb2 = 0;
        int nc1 = 0, nc2 = 0;
        gc::qmm_workspace_need(2 * kI, kD, &pb1, &nc1);
        gc::qmm_workspace_need(kD, kI, &pb2, &nc2);
        gc::QmmWorkspace ws;
        ws.partial_bytes = std::max(pb1, pb2), ws.n_counters = std::max(nc1, nc2);
        ws.partials = static_cast<float*>(dalloc(ws.partial_bytes));
        ws.counters = static_cast<int*>(dalloc(static_cast<size_t>(ws.n_counters) * 4));
        check(cudaMemset(ws.counters, 0, static_cast<size_t>(ws.n_counters) * 4), "counters");
        void* lres = dalloc(kD * 2);
        void* ly = dalloc(kD * 2);
        void* lxn = dalloc(kD * 2);
        void* lh = dalloc(kI * 2);
        void* lwn = dalloc(kD * 2);
        gc::random_fill(lres, DType::BF16, kD, 31, 1.f, 0.f, nullptr);
        gc::random_fill(ly, DType::BF16, kD, 32, 0.01f, 0.f, nullptr);
        gc::random_fill(lwn, DType::BF16, kD, 33, 0.5f, 1.f, nullptr);
        check(cudaDeviceSynchronize(), "library weights");
        Tensor tres(lres, DType::BF16, grimoire::Device::CUDA, {1, kD});
        Tensor ty(ly, DType::BF16, grimoire::Device::CUDA, {1, kD});
        Tensor txn(lxn, DType::BF16, grimoire::Device::CUDA, {1, kD});
        Tensor th(lh, DType::BF16, grimoire::Device::CUDA, {1, kI});
        Tensor twn(lwn, DType::BF16, grimoire::Device::CUDA, {kD});
        Tensor tgu(nullptr, DType::BF16, grimoire::Device::CUDA, {1, 2 * kI});
        gc::QmmParts parts;
        parts.n = 1, parts.glu = 1, parts.col[0] = 0, parts.col[1] = 2 * kI, parts.data[0] = lh;
        const bool ahead = gc::pdl_ahead_enabled();
        const double t_lib = record(
            "library", grimoire::bench::time_graph_ms(
                           [&](int i, cudaStream_t s) {
                               const int l = i % L;
                               gc::add_rmsnorm(tres, ty, twn, kEps, grimoire::NormKind::PLAIN, txn, s, ahead);
                               gc::qmm_int4(lgu[l], txn, tgu, ws, s, 0, &parts);
                               gc::qmm_int4(ldn[l], th, ty, ws, s);
                           },
                           2 * L));
        grimoire::bench::add_entry(ratios, "persist_over_library", t_p / t_lib);
        grimoire::bench::add_entry(ratios, "persist_over_stages", t_p / t_st);
        grimoire::bench::add_entry(ratios, "noacross_over_persist", t_na / t_p);
        grimoire::bench::add_entry(ratios, "state_persist_over_stages", t_ps / t_sst);
        if (!out.empty()) {
            std::string cmd = "probe_decode_chain --layers " + std::to_string(L);
            grimoire::bench::write_record_text(out, commit, cmd, bw, metrics, ratios);
            std::printf("wrote %s\n", out.c_str());
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "probe_decode_chain: %s\n", e.what());
        return 1;
    }
    return 0;
}
