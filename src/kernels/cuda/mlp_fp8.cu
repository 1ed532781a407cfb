// The one-row FP8 MLP block in one persistent launch (decode): y = Wd (silu(Wg x) * (Wu x)), the gate | up
// weight stacked as forward_glu takes it, both weights in the n-tile-major tile order (quant/tile_layout.h).
//
// Status: correct and tested; an opt-in (GRIMOIRE_MLP_FUSED=1) because it measured slower than the library's glu
// pass + down (27B MLP with its norm: H100 108.2 against 98.2 us, docs/BENCHMARKS.md session 30; the block alone
// 99.3). With the norm inside the launch (MlpPreNorm, GRIMOIRE_MLP_FUSED_NORM=1) the layer took 97.1 us against
// the library's 98.5 (H100, session 31), but the 27B FP8 decode read 0.820 of roofline against 0.858 by default.
//
// Why one launch (docs/BENCHMARKS.md, session 28's decode-chain probe): the one-row qmm of gate | up, the
// silu_mul and the qmm of down each ramp up and drain the weight stream, and down cannot start loading until
// gate | up has finished. Here one block per SM owns the whole block for both projections: a producer warp
// streams the block's share of gate | up and then of down into a shared-memory ring with bulk async copies
// (mbarrier completion), never waiting on the grid, so down's first tiles are in flight while gate | up's
// last rows, the grid barrier between the stages and h's staging run. Sixteen consumer warps take the tiles.
//
// Why the n-tile-major order (session 30): over the chunk-major order a block's share of each chunk is a short
// run of tiles, and balancing the 320 n-tiles of down over 132 SMs needs K segments, so 8-17 separate bands of
// the weight are in flight at once; that first form streamed at 0.67-0.79 of copy with no math at all
// (session 29). Here a stage's tiles, n-tile after n-tile, are one contiguous array, and block b takes the
// contiguous range [b U / G, (b + 1) U / G) of its U scale-group units (2 chunk tiles of one n-tile): every SM
// streams the same bytes, each as a copy would, in 16-tile (16 KB) bulk copies. A range crosses n-tiles, so
// only the n-tiles cut by a range's two ends are summed across blocks (at most two per block).
//
// Gate | up is streamed in pair order: gate n-tile p, then its partner, up n-tile p + I / 16, so a block holds
// both halves of every pair inside its range and computes those 16 channels of h = silu(g) * u itself. Packed
// kNtMajorPaired (the CUDA linear does so for a weight the loader marks as the MLP's gate | up) the pairs are
// stored in that order and a block's range is one contiguous run; over kNtMajor it is two runs, a slot one or
// two bulk copies (H100, session 30: ~4 us of a 27B layer against one contiguous range). Only the pairs cut by
// range boundaries are shared: each block stores its piece of them (32 sums) before the grid barrier, and after
// it every block adds the two pieces of every cut pair (block order) into its own copy of h. So stage A's tail is one round of
// stores and the barrier, not a chain of global round trips (session 30: four of them cost ~8 us an MLP on
// the H100 with the memory system loaded by the stream).
//
// Inside a block: ring slot k holds the range's tiles 16 k .. 16 k + 15, tile j going to warp j. A warp's tiles
// run through the n-tiles in order, so it keeps one n-tile's row sums in registers and writes them to a
// shared table [n-tile][warp][16] when it moves on; the block then adds the 16 warps in order. Down: an n-tile
// whole inside the range is stored; a cut one is a partial in the workspace, added by the last of its blocks to
// arrive (a counter per n-tile) in block order. All deterministic.
//
// Numerics, as the library's one-row path (quant_qmv.cuh) up to the order of the fp32 sums: E4M3 moved exactly
// into BF16 (a_fragment), x BF16, mma.sync with fp32 accumulation over a chunk, then acc = fma(chunk sum,
// scale, acc) (the library sums the group's two chunks before the scale); g and u rounded to BF16 as stored
// parts would be, h = silu(g) * u rounded to BF16 (silu_mul's formula), y rounded to BF16.
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

constexpr int kWarps = 16;  // consumer warps, + one producer warp
constexpr int kThreads = (kWarps + 1) * 32;
constexpr int kTileBytes = 1024;  // an FP8 chunk tile: 16 rows x 64 channels
constexpr int kSlotTiles = 16;    // a ring slot: one tile a consumer warp
constexpr int kSlotBytes = kSlotTiles * kTileBytes;
constexpr int kMaxSlots = 8;   // ring slots (as shared memory allows, up to this)
constexpr int kMaxLocal = 48;  // n-tiles one block's range may touch (the shared table's rows)
// MlpArgs::prefetch unless a variant asks otherwise: none. 128-384 KB a block measured slower (H100, session 30:
// 119.6-122.3 us a 27B MLP against 118.8 without), the L2 traffic delaying the stage change's own loads.
constexpr int kPrefetchBytes = 0;
constexpr int kStageBatch = 8;  // 16-byte pieces of x / h (and cut pairs' rows) a consumer thread stages
constexpr int kNormVecs = 2;    // the pre-norm's 8-channel vectors a consumer thread holds (D <= 8192)

// One stage: a weight of NT n-tiles x KC chunks in an n-tile-major order, as U = NT KC / 2 units of two tiles,
// streamed in the order of its logical n-tiles: the weight's own, or (paired, gate | up) gate p, up p, gate p + 1,
// ... Stream position l is the weight's n-tile logical(l), stored where tile_index puts it: in kNtMajorPaired
// order (gate | up packed for this kernel) stream position l is also storage n-tile l, so a block's range is
// one contiguous run of the weight; in kNtMajor order a paired stream reads from two places.
struct StageArgs {
    const uint8_t* words;  // [NT][KC] tiles of kTileBytes
    const float* scales;   // [SN][SG]
    int NT, KC, bn, SG, U;
    int paired;
    int order;      // the weight's tile order (tile_layout.h TileOrder): kNtMajor or kNtMajorPaired
    float* part;    // down: [G][2][16] each block's partial sums of its first / last n-tile where the range cuts
                    // them; gate | up: [G][2][32] its pieces (g rows, u rows) of the pairs its range's ends cut
    unsigned* cnt;  // down: [NT] blocks arrived on a cut n-tile, left at zero
    // The weight's n-tile at stream position l, and where tile (l, c) is stored (device code only: see the sm_90
    // guard below).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __device__ int logical(int l) const { return paired ? static_cast<int>(paired_tile(l, NT)) : l; }
    __device__ int64_t tile_at(int l, int c) const { return tile_index(logical(l), c, NT, KC, order); }
#endif
};

struct MlpArgs {
    StageArgs st[2];  // A: gate | up, B: down
    const __nv_bfloat16* x;  // [D]
    __nv_bfloat16* h;        // [I]
    __nv_bfloat16* y;        // [D]
    unsigned* bar;           // [2] the grid barrier's counters, left at zero
    unsigned long long* trace;  // benchmark only: [G][kMlpTracePoints] globaltimer, or null
    int D, I;
    int G;       // grid blocks
    int nslots;  // ring slots (<= kMaxSlots)
    int nloc;    // rows of the shared n-tile table (the most n-tiles a block's range touches, either stage)
    int nsc[2];  // floats of each stage's scale table (its most n-tiles a block touches x SG)
    // The pre-norm (prenorm != 0, mlp_fp8's MlpPreNorm): x = rmsnorm(res + yin) * (w_off + nw), res += yin.
    int prenorm;
    __nv_bfloat16* res;        // [D], updated (by block 0, after the grid barrier: every block has read it)
    const __nv_bfloat16* yin;  // [D]
    const float* nw;           // [D]
    float eps, w_off;
    int prefetch;  // bytes of down's range each block asks of L2 once gate | up's last slot is issued
};

// Shared memory: this header, then x (later h: BF16, max(D, I) padded to 64 channels), the n-tile table
// (nloc x kWarps x 16 f32), the two stages' scale tables (nsc[0] + nsc[1] f32), the pre-norm's weight (D f32),
// then the ring (nslots x kSlotBytes), each at a 128-byte offset.
struct Smem {
    uint64_t full[kMaxSlots], empty[kMaxSlots];
    int cut_last[2];               // whether this block is the last to arrive on its first / last cut n-tile
    float ssum[kWarps];            // the pre-norm's sums of squares, a consumer warp each
    float val[kMaxLocal * 16];     // stage A: the block's sums of each logical n-tile it touches
};
__host__ __device__ constexpr size_t align128(size_t n) { return (n + 127) / 128 * 128; }
__host__ __device__ inline size_t xs_offset() { return align128(sizeof(Smem)); }
__host__ __device__ inline size_t red_offset(int D, int I) {
    return xs_offset() + align128(static_cast<size_t>((max(D, I) + 63) / 64 * 64) * 2);
}
__host__ __device__ inline size_t sc_offset(int D, int I, int nloc) {
    return red_offset(D, I) + align128(static_cast<size_t>(nloc) * kWarps * 16 * 4);
}
__host__ __device__ inline size_t nw_offset(int D, int I, int nloc, int nsc) {
    return sc_offset(D, I, nloc) + align128(static_cast<size_t>(nsc) * 4);
}
__host__ __device__ inline size_t ring_offset(int D, int I, int nloc, int nsc) {
    return nw_offset(D, I, nloc, nsc) + align128(static_cast<size_t>(D) * 4);
}
// Block b's range of a stage's units: [range_at(b), range_at(b + 1)). 32-bit (plan checks G U < 2^32): the
// stage changes compute it for every boundary, and a 64-bit division is a ~70-instruction routine.
__host__ __device__ inline int range_at(int b, int U, int G) {
    return static_cast<int>(static_cast<unsigned>(b) * static_cast<unsigned>(U) / static_cast<unsigned>(G));
}

// Device code for sm_90 only (bulk copies, mbarriers); other passes see the kernel's empty body.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// mlp_fp8_variant's trace points: consumers start, x staged, stage A's tiles done, its n-tiles stored, past the
// grid barrier, h loaded, the cut pairs added (h staged), stage B's tiles done, its n-tiles stored.
constexpr int kMlpTracePoints = 9;
constexpr uint64_t kTimeoutNs = 4000000000ull;  // a wait this long is a bug: trap, don't hang the card

// The block whose range holds unit u < U (every range is non-empty: plan asks U >= G).
__device__ __forceinline__ int block_of(int u, int U, int G) {
    int b = static_cast<int>(static_cast<int64_t>(u) * G / U);
    while (b > 0 && range_at(b, U, G) > u) --b;
    while (range_at(b + 1, U, G) <= u) ++b;
    return b;
}

using qmm::globaltimer_ns;
using qmm::ld_acquire_gpu;
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(kWarps * 32) : "memory");
}
__device__ __forceinline__ unsigned atom_add_acq_rel(unsigned* p) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
    return old;
}

// Every block's consumers meet here (thread 0 of each). The counters end at zero: the last block to leave
// resets both, which no other block can still be reading (each has left: it saw `arrive` at G).
__device__ void grid_barrier(unsigned* arrive, unsigned* depart, unsigned G) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(arrive) : "memory");
    const uint64_t t0 = globaltimer_ns();
    while (ld_acquire_gpu(arrive) < G)
        if (globaltimer_ns() - t0 > kTimeoutNs) __trap();
    if (atomicAdd(depart, 1u) == G - 1) {
        atomicExch(arrive, 0u);
        atomicExch(depart, 0u);
    }
}

using qmm::bulk_load;
using qmm::mbar_arrive;
using qmm::mbar_arrive_tx;
using qmm::mbar_init;
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
    qmm::mbar_wait_bounded(b, parity, kTimeoutNs);
}

// x or h into shared memory: each consumer thread loads its (up to) kStageBatch 16-byte pieces of n valid ones
// (zeros past n, up to total <= kStageBatch x the consumer threads: plan checks) before storing any, so the
// staging is one round trip.
__device__ __forceinline__ void stage_load(uint4 (&v)[kStageBatch], const uint4* src, int n) {
    const int ct = static_cast<int>(threadIdx.x);
#pragma unroll
    for (int j = 0; j < kStageBatch; ++j) {
        const int i = ct + j * kWarps * 32;
        v[j] = i < n ? __ldcg(src + i) : make_uint4(0u, 0u, 0u, 0u);
    }
}
__device__ __forceinline__ void stage_store(uint4* dst, const uint4 (&v)[kStageBatch], int total) {
    const int ct = static_cast<int>(threadIdx.x);
#pragma unroll
    for (int j = 0; j < kStageBatch; ++j)
        if (ct + j * kWarps * 32 < total) dst[ct + j * kWarps * 32] = v[j];
}

// A stage's scales of the logical n-tiles [t0 / KC, (t1 - 1) / KC] into dst [local n-tile][SG], every load of a
// round issued before its stores.
__device__ void stage_scales(const StageArgs& s, int t0, int t1, float* dst) {
    const int ct = static_cast<int>(threadIdx.x), nt0 = t0 / s.KC, n = ((t1 - 1) / s.KC - nt0 + 1) * s.SG;
    for (int base = 0; base < n; base += kStageBatch * kWarps * 32) {
        float v[kStageBatch];
#pragma unroll
        for (int j = 0; j < kStageBatch; ++j) {
            const int i = base + ct + j * kWarps * 32, ln = i / s.SG;
            v[j] = i < n ? __ldg(s.scales + static_cast<int64_t>(s.logical(nt0 + ln) * 16 / s.bn) * s.SG + (i - ln * s.SG))
                         : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kStageBatch; ++j)
            if (base + ct + j * kWarps * 32 < n) dst[base + ct + j * kWarps * 32] = v[j];
    }
}

// The A fragment's four k-tiles of one chunk tile against the chunk of x (lane t's 16 channels), into c.
__device__ __forceinline__ void chunk_mma(float (&c)[4], const uint4 (&w)[2], uint4 xa, uint4 xb) {
    const uint32_t b0[4] = {xa.x, xa.z, xb.x, xb.z}, b1[4] = {xa.y, xa.w, xb.y, xb.w};
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {
        uint32_t a0, a1, a2, a3;
        qmm::a_fragment<true, 2>(w, kt, 0u, 0u, a0, a1, a2, a3);
        if (kt == 0)
            qmm::mma_bf16_first(c, a0, a1, a2, a3, b0[kt], b1[kt]);
        else
            qmm::mma_bf16(c, a0, a1, a2, a3, b0[kt], b1[kt]);
    }
}

// The first `bytes` of the block's tiles [t0, t1) of a stage asked of L2 (bulk prefetches of up to 16 KB; a
// stage in physical order).
__device__ void prefetch_head(const StageArgs& s, int t0, int t1, int bytes) {
    const int64_t end = min(static_cast<int64_t>(t1 - t0) * kTileBytes, static_cast<int64_t>(bytes));
    const uint8_t* base = s.words + static_cast<int64_t>(t0) * kTileBytes;
    for (int64_t o = 0; o < end; o += kSlotBytes)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + o),
                     "r"(static_cast<unsigned>(min(static_cast<int64_t>(kSlotBytes), end - o)))
                     : "memory");
}

// Producer: the block's tiles [t0, t1) of the stage, 16 a slot: one bulk copy a slot where its tiles are stored
// contiguously, else one per stored run (a paired stream over kNtMajor: a copy per n-tile the slot crosses).
__device__ void produce(const StageArgs& s, int t0, int t1, Smem& sm, uint8_t* ring, int nslots, int& it) {
    for (int t = t0; t < t1; t += kSlotTiles, ++it) {
        const int slot = it % nslots, use = it / nslots;
        if (use > 0) mbar_wait(&sm.empty[slot], (use - 1) & 1);
        const int e = min(t1, t + kSlotTiles);
        mbar_arrive_tx(&sm.full[slot], static_cast<unsigned>((e - t) * kTileBytes));
        int q0 = t;                       // the stream tiles [q0, q) are stored contiguously from src
        int64_t src = -1;
        for (int q = t; q < e;) {
            const int l = q / s.KC, c = q - l * s.KC, run = min(e, (l + 1) * s.KC) - q;
            const int64_t at = s.tile_at(l, c);
            if (src < 0) {
                src = at;
            } else if (at != src + (q - q0)) {  // not where the last run ends: copy what is gathered
                bulk_load(ring + slot * kSlotBytes + (q0 - t) * kTileBytes, s.words + src * kTileBytes,
                          static_cast<unsigned>((q - q0) * kTileBytes), &sm.full[slot]);
                q0 = q, src = at;
            }
            q += run;
        }
        bulk_load(ring + slot * kSlotBytes + (q0 - t) * kTileBytes, s.words + src * kTileBytes,
                  static_cast<unsigned>((e - q0) * kTileBytes), &sm.full[slot]);
    }
}

// Consumers: warp w takes tile 16 k + w of the range from slot k; its row sums of each n-tile go to
// red [n-tile - t0 / KC][warp][16] (rows of n-tiles it has no tile of stay as zeroed).
// MODE (mlp_fp8_variant's math): 1 the block's math; 0 none (the tiles taken without computing); 2 the math
// with every scale 1 (no scale loads: wrong results, the scales' cost).
template <int MODE>
__device__ void consume(const StageArgs& s, int t0, int t1, Smem& sm, const uint8_t* ring, int nslots,
                        const uint4* xs4, const float* ssc, float* red, int& it) {
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int t = lane & 3, g = lane >> 2;
    const int nt0 = t0 / s.KC;
    int i = t0 + warp, nt = i / s.KC, c = i - nt * s.KC;  // this warp's next tile
    int cur = nt;
    float acc0 = 0.0f, acc1 = 0.0f;

    auto flush = [&]() {
        if (t == 0) {
            float* r = red + ((cur - nt0) * kWarps + warp) * 16;
            r[g] = acc0, r[g + 8] = acc1;
        }
    };
    for (int base = t0; base < t1; base += kSlotTiles, ++it, i += kSlotTiles) {
        const int slot = it % nslots;
        // Every warp waits for every slot's data, its tile there or not: a warp that arrived on `empty`
        // before the slot's copy had landed could otherwise take that phase for the next one's.
        mbar_wait(&sm.full[slot], (it / nslots) & 1);
        if (i < t1) {
            const uint4* t4 = reinterpret_cast<const uint4*>(ring + slot * kSlotBytes + warp * kTileBytes);
            const uint4 w[2] = {t4[2 * lane], t4[2 * lane + 1]};
            __syncwarp();
            if (lane == 0) mbar_arrive(&sm.empty[slot]);
            if (nt != cur) {
                flush();
                cur = nt, acc0 = acc1 = 0.0f;
            }
            const uint4 xa = xs4[c * 8 + 2 * t], xb = xs4[c * 8 + 2 * t + 1];
            const float sc = MODE == 2 ? 1.0f : ssc[(nt - nt0) * s.SG + (c >> 1)];
            if constexpr (MODE != 0) {
                float cc[4];
                chunk_mma(cc, w, xa, xb);
                acc0 = fmaf(cc[0], sc, acc0), acc1 = fmaf(cc[2], sc, acc1);
            } else {
                acc0 += __uint_as_float((w[0].x ^ w[1].y ^ xa.x) & 0x3FFFFFFFu) * sc;
            }
            // On by 16 tiles: the next chunk, into the next n-tile(s) past the end of this one.
            for (c += kSlotTiles; c >= s.KC; c -= s.KC) ++nt;
        } else if (lane == 0) {
            mbar_arrive(&sm.empty[slot]);  // no tile of this warp's here: its arrival all the same
        }
    }
    if (t0 + warp < t1) flush();
}

// After consume: each n-tile the range touches, its warps' sums added in warp order. A whole n-tile goes to
// store(nt, row, value); a cut one to the block's partial (slot 0: the range's first n-tile, 1: its last), and
// the last of its blocks to arrive adds the partials in block order and stores it. Returns with cut_last set.
template <class Store>
__device__ void finish(const StageArgs& s, int b, int G, int t0, int t1, Smem& sm, const float* red, Store store) {
    const int ct = static_cast<int>(threadIdx.x);
    const int nt0 = t0 / s.KC, nloc = t1 > t0 ? (t1 - 1) / s.KC - nt0 + 1 : 0;
    auto whole = [&](int nt) { return nt * s.KC >= t0 && (nt + 1) * s.KC <= t1; };
    for (int i = ct; i < nloc * 16; i += kWarps * 32) {
        const int ln = i >> 4, row = i & 15, nt = nt0 + ln;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) v += red[(ln * kWarps + w) * 16 + row];
        if (whole(nt))
            store(nt, row, v);
        else
            __stcg(s.part + (b * 2 + (ln == 0 ? 0 : 1)) * 16 + row, v);
    }
    consumers_sync();
    if (ct < 2) {
        const int ln = ct == 0 ? 0 : nloc - 1, nt = nt0 + ln;
        int last = 0;
        if (nloc > 0 && (ct == 0 || nloc > 1) && !whole(nt)) {
            const int bf = block_of(nt * s.KC / 2, s.U, G), bl = block_of(((nt + 1) * s.KC - 1) / 2, s.U, G);
            // This block's partial stores (ordered before by the barrier) are released with the arrival; the
            // last arrival acquires the others'. The last resets the counter for the next launch.
            __threadfence();
            last = atom_add_acq_rel(s.cnt + nt) == static_cast<unsigned>(bl - bf);
            if (last) atomicExch(s.cnt + nt, 0u);
        }
        sm.cut_last[ct] = last;
    }
    consumers_sync();
    if (ct < 32) {
        const int j = ct >> 4, row = ct & 15;
        if (sm.cut_last[j]) {
            const int nt = nt0 + (j == 0 ? 0 : nloc - 1);
            const int bf = block_of(nt * s.KC / 2, s.U, G), bl = block_of(((nt + 1) * s.KC - 1) / 2, s.U, G);
            float v = 0.0f;
            for (int bb = bf; bb <= bl; ++bb) {
                // nt is the first n-tile of every block after bf; of bf, its first only if bf's range starts in it.
                const int first = 2 * range_at(bb, s.U, G) / s.KC == nt;
                v += __ldcg(s.part + (bb * 2 + (first ? 0 : 1)) * 16 + row);
            }
            store(nt, row, v);
        }
    }
    consumers_sync();
}
#endif

// MODE as consume's: 1 the library's launch, 0 and 2 benchmark variants.
// At most kMaxRegs registers a thread (the compiler's choice was 95): the one-row add_rmsnorm in front of the
// block (640 threads x 32 registers) must fit on an SM beside it, or the SM that runs the norm starts its block
// of the next MLP only when the norm ends, and every other block waits for it at the grid barrier (H100,
// session 30: ~10 us an MLP layer between two fused launches with the norm against none).
constexpr int kMaxRegs = 80;
template <int MODE>
__global__ void __maxnreg__(kMaxRegs) mlp_fp8_kernel(MlpArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem_raw[];
    Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
    const int pad = (max(a.D, a.I) + 63) / 64 * 64;
    uint4* xs4 = reinterpret_cast<uint4*>(smem_raw + xs_offset());  // x, then h: [pad] BF16
    float* red = reinterpret_cast<float*>(smem_raw + red_offset(a.D, a.I));
    float* sca = reinterpret_cast<float*>(smem_raw + sc_offset(a.D, a.I, a.nloc));  // A's, then B's
    uint8_t* ring = smem_raw + ring_offset(a.D, a.I, a.nloc, a.nsc[0] + a.nsc[1]);
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int b = static_cast<int>(blockIdx.x), G = a.G;
    const StageArgs& A = a.st[0];
    const StageArgs& B = a.st[1];
    const int a0 = 2 * range_at(b, A.U, G), a1 = 2 * range_at(b + 1, A.U, G);
    const int b0 = 2 * range_at(b, B.U, G), b1 = 2 * range_at(b + 1, B.U, G);

    if (threadIdx.x == 0) {
        for (int i = 0; i < a.nslots; ++i) mbar_init(&sm.full[i], 1), mbar_init(&sm.empty[i], kWarps);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    int it = 0;
    if (warp == kWarps) {  // producer: both stages' slots in the consumers' order, never waiting on the grid
        if (lane == 0) {
            produce(A, a0, a1, sm, ring, a.nslots, it);
            // Down's first tiles asked of L2 now: the ring alone covers only a few microseconds of the stream while
            // the consumers finish gate | up, meet at the grid barrier and stage h, and HBM would idle past that.
            prefetch_head(B, b0, b1, a.prefetch);
            produce(B, b0, b1, sm, ring, a.nslots, it);
        }
        return;
    }

    const int ct = static_cast<int>(threadIdx.x);
    auto mark = [&](int i) {
        if (a.trace && ct == 0) a.trace[b * kMlpTracePoints + i] = globaltimer_ns();
    };
    auto zero_red = [&]() {
        for (int i = ct; i < a.nloc * kWarps * 16; i += kWarps * 32) red[i] = 0.0f;
    };
    mark(0);
    zero_red();
    // Both stages' scales of the n-tiles this block touches, [local n-tile][SG], before the programmatic-launch
    // wait (they are weights). Read from global memory inside the stream, every tile's scale load missed L1 and
    // waited on L2 for microseconds (H100, session 30: ~10 us a 27B MLP against the math with every scale 1).
    stage_scales(A, a0, a1, sca);
    stage_scales(B, b0, b1, sca + a.nsc[0]);
    float* nws = reinterpret_cast<float*>(smem_raw + nw_offset(a.D, a.I, a.nloc, a.nsc[0] + a.nsc[1]));
    if (a.prenorm) {  // the norm's weight too (f32 [D], as 16-byte pieces)
        uint4 v[kStageBatch];
        stage_load(v, reinterpret_cast<const uint4*>(a.nw), a.D / 4);
        stage_store(reinterpret_cast<uint4*>(nws), v, a.D / 4);
    }
    // x (the previous kernel's output) and the workspace only once the previous grid has completed.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    uint4 skeep[kNormVecs];  // the pre-norm: this thread's vectors of res + yin (block 0 stores them into res)
    if (!a.prenorm) {
        uint4 v[kStageBatch];
        stage_load(v, reinterpret_cast<const uint4*>(a.x), a.D / 8);
        stage_store(xs4, v, pad / 8);
    } else {
        // add_rmsnorm's math (fused_add_rmsnorm.cu): s = bf16(res + yin), r = rsqrt(sum s^2 / D + eps), x =
        // bf16(s r (w_off + w)); the sum of squares in another order (fp32), so x may differ from the kernel's
        // in the last bit where r does.
        uint4 rv[kNormVecs], yv[kNormVecs];
#pragma unroll
        for (int j = 0; j < kNormVecs; ++j) {
            const int v = ct + j * kWarps * 32;
            rv[j] = v < a.D / 8 ? __ldcg(reinterpret_cast<const uint4*>(a.res) + v) : make_uint4(0u, 0u, 0u, 0u);
            yv[j] = v < a.D / 8 ? __ldcg(reinterpret_cast<const uint4*>(a.yin) + v) : make_uint4(0u, 0u, 0u, 0u);
        }
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < kNormVecs; ++j) {
            skeep[j] = rv[j];
            ss += add_bf16x8_sumsq(skeep[j], yv[j]);  // zeros past D add nothing
        }
        ss = warp_sum(ss);
        if (lane == 0) sm.ssum[warp] = ss;
        consumers_sync();
        float tot = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) tot += sm.ssum[w];
        const float r = rsqrtf(tot / static_cast<float>(a.D) + a.eps);
#pragma unroll
        for (int j = 0; j < kNormVecs; ++j) {
            const int v = ct + j * kWarps * 32;
            if (v >= pad / 8) continue;
            uint4 o = make_uint4(0u, 0u, 0u, 0u);
            if (v < a.D / 8) {
                const __nv_bfloat162* s2 = reinterpret_cast<const __nv_bfloat162*>(&skeep[j]);
                __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 sf = __bfloat1622float2(s2[e]);
                    const int k = 8 * v + 2 * e;
                    o2[e] = __floats2bfloat162_rn(sf.x * r * (a.w_off + nws[k]), sf.y * r * (a.w_off + nws[k + 1]));
                }
            }
            xs4[v] = o;
        }
    }
    consumers_sync();
    mark(1);

    // ---- stage A: gate | up -> g | u, then h where a pair is complete ----
    consume<MODE>(A, a0, a1, sm, ring, a.nslots, xs4, sca, red, it);
    mark(2);
    consumers_sync();
    {
        // The warps' sums of each logical n-tile the range touches; then h for every pair whole in the range, and
        // this block's pieces of the pairs cut at its ends (part [b][0]: the first, [b][1]: the last).
        const int nt0 = a0 / A.KC, nloc = (a1 - 1) / A.KC - nt0 + 1, pt = 2 * A.KC;  // pt: tiles a pair
        for (int i = ct; i < nloc * 16; i += kWarps * 32) {
            const int ln = i >> 4, row = i & 15;
            float v = 0.0f;
#pragma unroll
            for (int w = 0; w < kWarps; ++w) v += red[(ln * kWarps + w) * 16 + row];
            sm.val[i] = v;
        }
        consumers_sync();
        const int p0 = a0 / pt, p1 = (a1 - 1) / pt;  // the pairs the range touches
        for (int i = ct; i < (p1 - p0 + 1) * 16; i += kWarps * 32) {
            const int p = p0 + (i >> 4), row = i & 15;
            // Logical n-tiles 2 p (g) and 2 p + 1 (u): this block's sums, zero where it has none of the n-tile.
            const int lg = 2 * p - nt0, lu = lg + 1;
            const float g = lg >= 0 && lg < nloc ? sm.val[lg * 16 + row] : 0.0f;
            const float u = lu >= 0 && lu < nloc ? sm.val[lu * 16 + row] : 0.0f;
            if (p * pt >= a0 && (p + 1) * pt <= a1) {
                const float gq = __bfloat162float(__float2bfloat16(g)), uq = __bfloat162float(__float2bfloat16(u));
                a.h[p * 16 + row] = __float2bfloat16(gq * sigmoidf_(gq) * uq);
            } else {
                float* d = A.part + (b * 2 + (p == p0 && p * pt < a0 ? 0 : 1)) * 32 + row;
                __stcg(d, g), __stcg(d + 16, u);
            }
        }
    }
    zero_red();
    mark(3);
    if (ct == 0) grid_barrier(a.bar, a.bar + 1, static_cast<unsigned>(G));
    consumers_sync();
    mark(4);
    if (a.prenorm && b == 0) {  // every block has read res: the residual stream moves on
#pragma unroll
        for (int j = 0; j < kNormVecs; ++j) {
            const int v = ct + j * kWarps * 32;
            if (v < a.D / 8) reinterpret_cast<uint4*>(a.res)[v] = skeep[j];
        }
    }
    // Every block is past stage A: the next kernel may launch (it still waits for this grid to complete).
    asm volatile("griddepcontrol.launch_dependents;");

    // ---- stage B: down over h -> y ----
    // h as the blocks stored it, then every pair cut by a boundary of stage A's ranges from its two pieces (in
    // block order) over the stale values h holds there; block bb also stores the one after its range into h.
    // Every load is issued before the first store (one round trip: under the weight stream each costs ~1 us).
    {
        const int pt = 2 * A.KC;
        uint4 v[kStageBatch];
        float q[kStageBatch][4];
        stage_load(v, reinterpret_cast<const uint4*>(a.h), a.I / 8);
        auto cut_pair = [&](int j) {  // item ct + j S: boundary bb, row; -1 where there is no cut there
            const int i = ct + j * kWarps * 32, bb = i >> 4;
            if (i >= (G - 1) * 16) return -1;
            const int T = 2 * range_at(bb + 1, A.U, G);
            return T % pt == 0 ? -1 : T / pt;
        };
#pragma unroll
        for (int j = 0; j < kStageBatch; ++j) {
            const int i = ct + j * kWarps * 32, bb = i >> 4, row = i & 15;
            if (cut_pair(j) < 0) continue;
            const float* lo = A.part + (bb * 2 + 1) * 32 + row;
            const float* hi = A.part + ((bb + 1) * 2) * 32 + row;
            q[j][0] = __ldcg(lo), q[j][1] = __ldcg(hi), q[j][2] = __ldcg(lo + 16), q[j][3] = __ldcg(hi + 16);
        }
        stage_store(xs4, v, pad / 8);
        consumers_sync();
        mark(5);
        auto* hs = reinterpret_cast<__nv_bfloat16*>(xs4);
#pragma unroll
        for (int j = 0; j < kStageBatch; ++j) {
            const int p = cut_pair(j), i = ct + j * kWarps * 32, row = i & 15;
            if (p < 0) continue;
            const float gq = __bfloat162float(__float2bfloat16(q[j][0] + q[j][1]));
            const float uq = __bfloat162float(__float2bfloat16(q[j][2] + q[j][3]));
            const __nv_bfloat16 hv = __float2bfloat16(gq * sigmoidf_(gq) * uq);
            hs[p * 16 + row] = hv;
            if ((i >> 4) == b) a.h[p * 16 + row] = hv;
        }
    }
    consumers_sync();
    mark(6);
    consume<MODE>(B, b0, b1, sm, ring, a.nslots, xs4, sca + a.nsc[0], red, it);
    mark(7);
    consumers_sync();
    finish(B, b, G, b0, b1, sm, red, [&](int nt, int row, float v) { a.y[nt * 16 + row] = __float2bfloat16(v); });
    mark(8);
#else
    (void)a;
#endif
}

int sm_count() {
    static const int n = device_attr(cudaDevAttrMultiProcessorCount);
    return n;
}

size_t max_smem() {
    static const size_t n = static_cast<size_t>(device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin));
    return n;
}

struct Plan {
    int G = 0, nslots = 0, nloc = 0, nsc[2] = {0, 0};
    size_t smem = 0, partial_bytes = 0;
    int counters = 0;
};

// The most n-tiles one block's range touches in a stage of NT n-tiles x KC chunks.
int most_local(int64_t NT, int64_t KC, int G) {
    const int U = static_cast<int>(NT * KC / 2);
    int most = 0;
    for (int b = 0; b < G; ++b) {
        const int t0 = 2 * range_at(b, U, G), t1 = 2 * range_at(b + 1, U, G);
        if (t1 > t0) most = std::max(most, static_cast<int>((t1 - 1) / KC - t0 / KC + 1));
    }
    return most;
}

Plan plan(int64_t D, int64_t I) {
    Plan p;
    p.G = sm_count();
    // Every block's range non-empty in down (U >= G: the cut n-tiles' arrivals count the blocks between their
    // ends) and at least a pair (2 KC tiles) in gate | up (a pair is then cut by at most one boundary), and tile
    // offsets in int.
    if (p.G < 1 || D % 128 != 0 || I % 128 != 0 || 2 * I * D / 128 >= (int64_t{1} << 31) / 1024 ||
        2 * I / 16 * (D / 128) / p.G < D / 64 || D / 16 * (I / 128) < p.G)
        return p;
    // x / h, the norm weight and the cut pairs' rows staged in one batch a thread (stage_load); range_at in 32
    // bits.
    if (std::max(D, I) / 8 > kStageBatch * kWarps * 32 || D / 4 > kStageBatch * kWarps * 32 ||
        (p.G - 1) * 16 > kStageBatch * kWarps * 32 ||
        static_cast<int64_t>(p.G + 1) * (2 * I / 16) * (D / 128) >= (int64_t{1} << 32) ||
        static_cast<int64_t>(p.G + 1) * (D / 16) * (I / 128) >= (int64_t{1} << 32))
        return p;
    p.nloc = std::max(most_local(2 * I / 16, D / 64, p.G), most_local(D / 16, I / 64, p.G));
    // As many ring slots as shared memory holds, up to kMaxSlots (the ring is most of the bytes in flight), or up
    // to GRIMOIRE_MLP_SLOTS (4..8; benchmark knob: fewer slots leave an SM's shared memory to the next kernel's
    // block, which can then start its weight stream beside this one's tail).
    // (2 KB kept back: the kernel's own static shared memory and the system's reservation, which the opt-in limit
    // may not cover on every driver.)
    p.nsc[0] = most_local(2 * I / 16, D / 64, p.G) * static_cast<int>(D / 128);
    p.nsc[1] = most_local(D / 16, I / 64, p.G) * static_cast<int>(I / 128);
    const size_t fixed = ring_offset(static_cast<int>(D), static_cast<int>(I), p.nloc, p.nsc[0] + p.nsc[1]) + 2048;
    static const int slot_cap = [] {
        const char* e = std::getenv("GRIMOIRE_MLP_SLOTS");
        const int v = e ? std::atoi(e) : 0;
        return v >= 4 && v <= kMaxSlots ? v : kMaxSlots;
    }();
    p.nslots = max_smem() > fixed ? static_cast<int>(std::min<size_t>(slot_cap, (max_smem() - fixed) / kSlotBytes)) : 0;
    p.smem = fixed + static_cast<size_t>(p.nslots) * kSlotBytes;
    p.partial_bytes = static_cast<size_t>(p.G * 2 * 32 + p.G * 2 * 16) * sizeof(float);
    p.counters = static_cast<int>(D / 16 + 2);
    return p;
}

}  // namespace

void mlp_fp8_workspace_need(int64_t D, int64_t I, size_t* partial_bytes, int* n_counters) {
    const Plan p = plan(D, I);
    *partial_bytes = p.partial_bytes;
    *n_counters = p.counters;
}

bool mlp_fp8_ok(const Fp8Dev& gate_up, const Fp8Dev& down) {
    const int64_t D = gate_up.K, I = down.K;
    if (!device_is_hopper() || (gate_up.tile_order != kNtMajor && gate_up.tile_order != kNtMajorPaired) ||
        down.tile_order != kNtMajor || gate_up.N != 2 * I || down.N != D || D % 128 != 0 || I % 128 != 0)
        return false;
    // 128-channel scale groups (two chunks) and 16-row tiles inside one scale row.
    if (gate_up.bk != 128 || down.bk != 128 || gate_up.bn % 16 != 0 || down.bn % 16 != 0) return false;
    if (gate_up.SG != D / 128 || down.SG != I / 128) return false;
    const Plan p = plan(D, I);
    return p.G >= 8 && p.nloc > 0 && p.nloc <= kMaxLocal && p.nslots >= 4 && p.smem <= max_smem();
}

void mlp_fp8(const Fp8Dev& gate_up, const Fp8Dev& down, const Tensor& x, Tensor& h, Tensor& y,
             const QmmWorkspace& ws, cudaStream_t s, const MlpPreNorm* pre) {
    mlp_fp8_variant(gate_up, down, x, h, y, ws, s, 1, nullptr, -1, pre);
}

bool mlp_fp8_prenorm_ok(int64_t D) { return D % 8 == 0 && D / 8 <= kNormVecs * kWarps * 32; }

void mlp_fp8_variant(const Fp8Dev& gate_up, const Fp8Dev& down, const Tensor& x, Tensor& h, Tensor& y,
                     const QmmWorkspace& ws, cudaStream_t s, int math, unsigned long long* trace,
                     int prefetch_kb, const MlpPreNorm* pre) {
    if (!mlp_fp8_ok(gate_up, down)) throw Error("cuda mlp_fp8: weights this kernel does not take (mlp_fp8_ok)");
    const int64_t D = gate_up.K, I = down.K;
    if (pre) {
        if (!mlp_fp8_prenorm_ok(D) || pre->res.dtype != DType::BF16 || pre->y.dtype != DType::BF16 ||
            pre->res.numel() != D || pre->y.numel() != D || !pre->w || pre->res.data == pre->y.data)
            throw Error("cuda mlp_fp8: the pre-norm needs res [1, D] and y [1, D] BF16 (apart) and w [D] f32");
    }
    if ((!pre && (x.dtype != DType::BF16 || x.numel() != D)) || h.dtype != DType::BF16 || y.dtype != DType::BF16 ||
        y.numel() != D || h.numel() != I)
        throw Error("cuda mlp_fp8: x [1, D], h [1, I] and y [1, D] must be BF16 (D " + std::to_string(D) +
                    ", I " + std::to_string(I) + ")");
    const Plan p = plan(D, I);
    if (!ws.partials || !ws.counters || ws.partial_bytes < p.partial_bytes || ws.n_counters < p.counters)
        throw Error("cuda mlp_fp8: workspace too small (reserve mlp_fp8_workspace_need)");
    MlpArgs a{};
    auto* cnt = reinterpret_cast<unsigned*>(ws.counters);
    auto stage = [&](StageArgs& st, const Fp8Dev& w, float* part, unsigned* c) {
        st.words = reinterpret_cast<const uint8_t*>(w.words), st.scales = w.scales, st.order = w.tile_order;
        st.NT = static_cast<int>(w.NT), st.KC = static_cast<int>(w.KC);
        st.bn = static_cast<int>(w.bn), st.SG = static_cast<int>(w.SG);
        st.U = static_cast<int>(w.NT * w.KC / 2);
        st.part = part, st.cnt = c;
    };
    stage(a.st[0], gate_up, ws.partials, nullptr);
    a.st[0].paired = 1;
    stage(a.st[1], down, ws.partials + p.G * 64, cnt);
    a.bar = cnt + D / 16;
    a.x = static_cast<const __nv_bfloat16*>(x.data);
    a.h = static_cast<__nv_bfloat16*>(h.data), a.y = static_cast<__nv_bfloat16*>(y.data);
    a.D = static_cast<int>(D), a.I = static_cast<int>(I), a.G = p.G, a.trace = trace, a.nslots = p.nslots;
    a.nloc = p.nloc, a.nsc[0] = p.nsc[0], a.nsc[1] = p.nsc[1];
    a.prefetch = prefetch_kb >= 0 ? prefetch_kb * 1024 : kPrefetchBytes;
    if (pre) {
        a.prenorm = 1;
        a.res = static_cast<__nv_bfloat16*>(pre->res.data), a.yin = static_cast<const __nv_bfloat16*>(pre->y.data);
        a.nw = pre->w, a.eps = pre->eps, a.w_off = pre->w_offset;
    }
    auto launch = [&](auto kernel) {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(p.smem));
        launch_pdl(kernel, dim3(static_cast<unsigned>(p.G)), dim3(kThreads), p.smem, s, a);
    };
    math == 1 ? launch(mlp_fp8_kernel<1>) : math == 2 ? launch(mlp_fp8_kernel<2>) : launch(mlp_fp8_kernel<0>);
    check_launch("mlp_fp8");
}

}  // namespace grimoire::cuda
