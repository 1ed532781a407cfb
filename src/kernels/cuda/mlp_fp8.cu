// The one-row FP8 MLP block in one persistent launch (decode): y = Wd (silu(Wg x) * (Wu x)) over the tile
// layout of quant/tile_layout.h, the gate | up weight stacked as forward_glu takes it.
//
// Status: correct and tested, but measured slower than the library's glu pass + down (H200, 27B MLP: 110.6 us
// against 80.1 a layer; docs/BENCHMARKS.md session 29), so the model takes it only with GRIMOIRE_MLP_FUSED=1.
// Its weight stream is the limit (0.67-0.79 of copy with no math): over this chunk-major layout a block's share
// of a chunk is a short run of tiles and the K segments keep many bands of the weight in flight at once; the
// probe's tiles of whole rows stream at copy. The design below is what a layout change would keep.
//
// Why one launch (docs/BENCHMARKS.md, session 28's decode-chain probe): the one-row qmm of gate | up, the
// silu_mul and the qmm of down each ramp up and drain the weight stream, and down cannot start loading until
// gate | up has finished. Here one block per SM owns the whole block for both projections: a producer warp
// streams the block's share of gate | up and then of down into a shared-memory ring with bulk async copies
// (mbarrier completion), never waiting on the grid, so down's first tiles are in flight while gate | up's
// last rows, the grid barrier between the stages and h's staging run. Sixteen consumer warps take the tiles.
//
// Work of a stage: its items (A: the I / 16 pairs of gate n-tile t and up n-tile t + I / 16; B: the D / 16
// n-tiles of down) over S segments of K (whole 128-channel scale groups). The (segment, item) units,
// segment-major, are cut into G equal contiguous ranges (stream-K), so a block owns one or two rectangles of
// consecutive items over one segment's chunks, and every SM streams the same bytes. The tile layout is
// chunk-major, so a rectangle's tiles of one chunk are one contiguous run a part (gate, up), and the blocks of a
// segment, advancing through its chunks at the same pace, read one contiguous band of the weight together: the
// DRAM sees a few copy-like streams (a first form that gave each block scattered 1 KB tiles read at ~0.5 of
// copy with no math at all, H100). S (segments()) is the divisor of the groups, at most 8, that gives the most
// even ranges, with a full slot a chunk where the shapes allow.
// A slot of the ring is 16 consecutive positions of a chunk's run(s) (position p: part p / n, item p % n of the
// rectangle's n), position p goes to warp p % 16, so a warp owns fixed positions over the whole rectangle and
// keeps their sums in registers: no reduction inside the block. Each (segment, item) partial goes to the
// workspace; the last of an item's S segments to arrive (a counter per item) adds them in segment order and
// stores the item. All deterministic.
//
// Numerics, as the library's one-row path (quant_qmv.cuh): E4M3 moved exactly into BF16 (a_fragment), x BF16,
// mma.sync with fp32 accumulation over a scale group, then acc = fma(group sum, scale, acc); g and u rounded to
// BF16 as stored parts would be, h = silu(g) * u rounded to BF16 (silu_mul's formula), y rounded to BF16. Only
// the summation order differs from the library's, so results agree with it to fp32 rounding, not bit for bit.
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

constexpr int kWarps = 16;                     // consumer warps, + one producer warp
constexpr int kThreads = (kWarps + 1) * 32;
constexpr int kTileBytes = 1024;               // an FP8 chunk tile: 16 rows x 64 channels
constexpr int kSlotTiles = 16;                 // a ring slot: 16 positions, one a consumer warp
constexpr int kSlotBytes = kSlotTiles * kTileBytes;
// Ring slots (MlpArgs::nslots: as shared memory allows, up to this). 8 measured faster than 11 (H200, session 29:
// 110.6 against 128 us a 27B MLP layer): more slots in flight spread each block's reads over more chunks.
constexpr int kMaxSlots = 8;
constexpr int kMaxK = 6;                       // slots a chunk of a rectangle (positions <= 96)

// One stage's weight and work: `runs` parts of `items` n-tiles each (part r's n-tile of item i: i + r * run_off),
// K in `segs` segments of `gps` scale groups (2 chunks each).
struct StageArgs {
    const uint32_t* words;  // tiles, NT n-tiles x KC chunks
    const float* scales;    // [SN][SG]
    int NT, KC, bn, SG;
    int items, runs, run_off, segs, gps;
    float* part;      // [segs][items][runs * 16] f32 partial sums of each (segment, item)
    unsigned* cnt;    // [items] segments arrived, left at zero
};

struct MlpArgs {
    StageArgs st[2];         // A: gate | up, B: down
    const __nv_bfloat16* x;  // [D]
    __nv_bfloat16* h;        // [I]
    __nv_bfloat16* y;        // [D]
    unsigned* bar;           // [2] the grid barrier's counters, left at zero
    unsigned long long* trace;  // benchmark only: [G][kMlpTracePoints] globaltimer, or null
    int D, I;
    int G;       // grid blocks
    int nslots;  // ring slots (<= kMaxSlots)
};

// Shared memory: this header, then x (later h: BF16, max(D, I) padded to 64 channels), then the ring
// (nslots x kSlotBytes), both at 128-byte offsets.
struct Smem {
    uint64_t full[kMaxSlots], empty[kMaxSlots];
    int last[2 * kSlotTiles * kMaxK];  // the stage's items whose last segment this block brings
};
__host__ __device__ constexpr size_t align128(size_t n) { return (n + 127) / 128 * 128; }
__host__ __device__ inline size_t xs_offset() { return align128(sizeof(Smem)); }
__host__ __device__ inline size_t ring_offset(int D, int I) {
    return xs_offset() + align128(static_cast<size_t>((max(D, I) + 63) / 64 * 64) * 2);
}

// Device code for sm_90 only (bulk copies, mbarriers); other passes see the kernel's empty body.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// mlp_fp8_variant's trace points: consumers start, x staged, stage A's tiles done, its items stored, past the
// grid barrier, h staged, stage B's tiles done, its items stored.
constexpr int kMlpTracePoints = 8;
constexpr uint64_t kTimeoutNs = 4000000000ull; // a grid wait this long is a bug: trap, don't hang the card

__device__ __forceinline__ int range_at(int b, int W, int G) {
    return static_cast<int>(static_cast<int64_t>(b) * W / G);
}

using qmm::globaltimer_ns;
using qmm::ld_acquire_gpu;
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(kWarps * 32) : "memory");
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

// The block's next rectangle of a stage: segment `seg`, items [i0, i0 + n), from unit u (advanced past it).
struct Rect {
    int seg, i0, n;
    __device__ Rect(const StageArgs& s, int& u, int u1) {
        seg = u / s.items, i0 = u - seg * s.items;
        n = min(s.items - i0, u1 - u);
        u += n;
    }
    __device__ int npos(const StageArgs& s) const { return s.runs * n; }
    __device__ int c0(const StageArgs& s) const { return seg * s.gps * 2; }
    __device__ int c1(const StageArgs& s) const { return (seg + 1) * s.gps * 2; }
    // The n-tile of position p.
    __device__ int ntile(const StageArgs& s, int p) const { return i0 + p % n + (p / n) * s.run_off; }
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

// Producer: the slots of every rectangle of the stage, chunk by chunk, 16 positions a slot (one or two
// contiguous runs of tiles).
__device__ void produce(const StageArgs& s, int u0, int u1, Smem& sm, uint8_t* ring, int nslots, int& it) {
    for (int u = u0; u < u1;) {
        const Rect r(s, u, u1);
        const int np = r.npos(s), nsl = (np + kSlotTiles - 1) / kSlotTiles;
        for (int c = r.c0(s); c < r.c1(s); ++c) {
            for (int k = 0; k < nsl; ++k, ++it) {
                const int slot = it % nslots, use = it / nslots;
                if (use > 0) mbar_wait(&sm.empty[slot], (use - 1) & 1);
                const int p0 = k * kSlotTiles, p1 = min(np, p0 + kSlotTiles);
                mbar_arrive_tx(&sm.full[slot], static_cast<unsigned>((p1 - p0) * kTileBytes));
                for (int p = p0; p < p1;) {  // runs of consecutive n-tiles: up to the end of a part
                    const int q = min(p1, (p / r.n + 1) * r.n);
                    bulk_load(ring + slot * kSlotBytes + (p - p0) * kTileBytes,
                              s.words + tile_index(r.ntile(s, p), c, s.NT, s.KC) * (kTileBytes / 4),
                              static_cast<unsigned>((q - p) * kTileBytes), &sm.full[slot]);
                    p = q;
                }
            }
        }
    }
}

// Consumers: the block's rectangles of the stage; each (segment, item) partial to the workspace, the items
// whose last segment this block brings stored through `store(item, row, sums of the parts)`.
template <bool MATH, class Mark, class Store>
__device__ void consume(const StageArgs& s, int u0, int u1, Smem& sm, const uint8_t* ring, int nslots,
                        const uint4* xs4, int& it, Mark mark, int mk, Store store) {
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int ct = static_cast<int>(threadIdx.x), t = lane & 3, g = lane >> 2;
    const int width = s.runs * 16;
    int nr = 0, rseg[2] = {0, 0}, ri0[2] = {0, 0}, rn[2] = {0, 0};  // the block's rectangles (at most two)
    for (int u = u0; u < u1;) {
        const Rect r(s, u, u1);
        rseg[nr] = r.seg, ri0[nr] = r.i0, rn[nr] = r.n, ++nr;
        const int np = r.npos(s), nsl = (np + kSlotTiles - 1) / kSlotTiles;
        float cur[kMaxK][4], acc[kMaxK][2], sc[kMaxK];
        int row0[kMaxK];  // the scale row of each of this warp's positions
#pragma unroll
        for (int k = 0; k < kMaxK; ++k) {
            acc[k][0] = acc[k][1] = 0.0f, sc[k] = 0.0f;
            const int p = k * kSlotTiles + warp;
            row0[k] = p < np ? r.ntile(s, p) * 16 / s.bn : 0;
        }
        for (int c = r.c0(s); c < r.c1(s); ++c) {
            const bool first = (c & 1) == 0;
            if (first) {
#pragma unroll
                for (int k = 0; k < kMaxK; ++k)
                    if (k < nsl && k * kSlotTiles + warp < np)
                        sc[k] = __ldg(s.scales + static_cast<int64_t>(row0[k]) * s.SG + (c >> 1));
            }
            const uint4 xa = xs4[c * 8 + 2 * t], xb = xs4[c * 8 + 2 * t + 1];
#pragma unroll
            for (int k = 0; k < kMaxK; ++k) {
                if (k >= nsl) break;
                const int slot = it % nslots;
                // Every warp waits for every slot's data, its tile there or not: a warp that arrived on `empty`
                // before the slot's copy had landed could otherwise take that phase for the next one's.
                mbar_wait(&sm.full[slot], (it / nslots) & 1);
                if (k * kSlotTiles + warp < np) {
                    const uint4* t4 = reinterpret_cast<const uint4*>(ring + slot * kSlotBytes + warp * kTileBytes);
                    const uint4 w[2] = {t4[2 * lane], t4[2 * lane + 1]};
                    __syncwarp();
                    if (lane == 0) mbar_arrive(&sm.empty[slot]);
                    if constexpr (MATH) {
                        chunk_mma(cur[k], w, xa, xb, first);
                    } else {
                        const float v = __uint_as_float((w[0].x ^ w[1].y ^ xa.x) & 0x3FFFFFFFu);
                        cur[k][0] = first ? v : cur[k][0] + v, cur[k][2] = cur[k][0];
                    }
                } else if (lane == 0) {
                    mbar_arrive(&sm.empty[slot]);  // no tile of this warp's here: its arrival all the same
                }
                ++it;
            }
            if (!first) {
#pragma unroll
                for (int k = 0; k < kMaxK; ++k)
                    if (k < nsl && k * kSlotTiles + warp < np)
                        acc[k][0] = fmaf(cur[k][0], sc[k], acc[k][0]), acc[k][1] = fmaf(cur[k][2], sc[k], acc[k][1]);
            }
        }
        // This warp's positions: partial sums of rows g, g + 8 (every column of C holds the one token), stored
        // as they are; the counters wait for the end of the stage (one round for both rectangles).
        if (t == 0) {
#pragma unroll
            for (int k = 0; k < kMaxK; ++k) {
                const int p = k * kSlotTiles + warp;
                if (k < nsl && p < np) {
                    float* d = s.part + (static_cast<int64_t>(r.seg) * s.items + r.i0 + p % r.n) * width + (p / r.n) * 16;
                    __stcg(d + g, acc[k][0]), __stcg(d + g + 8, acc[k][1]);
                }
            }
        }
    }
    mark(mk);
    consumers_sync();
    // An item's segments arrive on its counter (acq_rel: this block's partial stores, ordered before by the
    // barrier, are released with it; the last arrival acquires the others'); the last resets it for the next launch.
    const int tot = rn[0] + rn[1];
    auto item_of = [&](int i) { return i < rn[0] ? ri0[0] + i : ri0[1] + i - rn[0]; };
    for (int i = ct; i < tot; i += kWarps * 32) {
        unsigned* c = s.cnt + item_of(i);
        unsigned old;
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(c) : "memory");
        const bool last = old == static_cast<unsigned>(s.segs - 1);
        if (last) atomicExch(c, 0u);
        sm.last[i] = last;
    }
    consumers_sync();
    const int64_t seg_stride = static_cast<int64_t>(s.items) * width;
    for (int i = ct; i < tot * 16; i += kWarps * 32) {
        const int li = i >> 4, row = i & 15;
        if (!sm.last[li]) continue;
        // The segments' partials in order, eight loads in flight at a time (this is the stage's tail).
        const int item = item_of(li);
        float sum[2] = {0.0f, 0.0f};
        const float* d = s.part + static_cast<int64_t>(item) * width + row;
        for (int q = 0; q < s.runs; ++q) {
            for (int sg = 0; sg < s.segs; sg += 8) {
                float v[8];
#pragma unroll
                for (int j = 0; j < 8; ++j) v[j] = sg + j < s.segs ? __ldcg(d + (sg + j) * seg_stride + q * 16) : 0.0f;
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    if (sg + j < s.segs) sum[q] += v[j];
            }
        }
        store(item, row, sum);
    }
    consumers_sync();
    mark(mk + 1);
}
#endif

// MATH false: the consumers take the tiles without computing (a benchmark floor).
template <bool MATH>
__global__ void __launch_bounds__(kThreads, 1) mlp_fp8_kernel(MlpArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem_raw[];
    Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
    const int pad = (max(a.D, a.I) + 63) / 64 * 64;
    uint4* xs4 = reinterpret_cast<uint4*>(smem_raw + xs_offset());  // x, then h: [pad] BF16
    uint8_t* ring = smem_raw + ring_offset(a.D, a.I);
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int b = static_cast<int>(blockIdx.x), G = a.G;
    const StageArgs& A = a.st[0];
    const StageArgs& B = a.st[1];
    const int WA = A.items * A.segs, WB = B.items * B.segs;
    const int a0 = range_at(b, WA, G), a1 = range_at(b + 1, WA, G);
    const int b0 = range_at(b, WB, G), b1 = range_at(b + 1, WB, G);

    if (threadIdx.x == 0) {
        for (int i = 0; i < a.nslots; ++i) mbar_init(&sm.full[i], 1), mbar_init(&sm.empty[i], kWarps);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    int it = 0;
    if (warp == kWarps) {  // producer: both stages' slots in the consumers' order, never waiting on the grid
        if (lane == 0) {
            produce(A, a0, a1, sm, ring, a.nslots, it);
            produce(B, b0, b1, sm, ring, a.nslots, it);
        }
        return;
    }

    const int ct = static_cast<int>(threadIdx.x);
    auto mark = [&](int i) {
        if (a.trace && ct == 0) a.trace[b * kMlpTracePoints + i] = globaltimer_ns();
    };
    mark(0);
    // x (the previous kernel's output) and the workspace only once the previous grid has completed.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int i = ct; i < pad / 8; i += kWarps * 32)
        xs4[i] = i * 8 < a.D ? __ldcg(reinterpret_cast<const uint4*>(a.x) + i) : make_uint4(0u, 0u, 0u, 0u);
    consumers_sync();
    mark(1);

    // ---- stage A: gate | up -> h ----
    consume<MATH>(A, a0, a1, sm, ring, a.nslots, xs4, it, mark, 2, [&](int item, int row, const float (&sum)[2]) {
        const float gq = __bfloat162float(__float2bfloat16(sum[0])), uq = __bfloat162float(__float2bfloat16(sum[1]));
        a.h[item * 16 + row] = __float2bfloat16(gq * sigmoidf_(gq) * uq);
    });
    if (ct == 0) grid_barrier(a.bar, a.bar + 1, static_cast<unsigned>(G));
    consumers_sync();
    mark(4);
    // Every block is past stage A: the next kernel may launch (it still waits for this grid to complete).
    asm volatile("griddepcontrol.launch_dependents;");

    // ---- stage B: down over h -> y ----
    for (int i = ct; i < pad / 8; i += kWarps * 32)
        xs4[i] = i * 8 < a.I ? __ldcg(reinterpret_cast<const uint4*>(a.h) + i) : make_uint4(0u, 0u, 0u, 0u);
    consumers_sync();
    mark(5);
    consume<MATH>(B, b0, b1, sm, ring, a.nslots, xs4, it, mark, 6, [&](int item, int row, const float (&sum)[2]) {
        a.y[item * 16 + row] = __float2bfloat16(sum[0]);
    });
#else
    (void)a;
#endif
}

int sm_count() {
    static const int n = [] {
        int dev = 0, v = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
        return v;
    }();
    return n;
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

// A stage's segment count: the divisor of the groups an item, at most 8 (the last block to arrive sums that
// many partials), whose ranges are the most even (the largest over the mean, ties to fewer segments), as long as
// a rectangle's positions fit the warps' registers (<= 16 kMaxK); 0 where none does.
int segments(int64_t items, int64_t gpi, int runs, int G) {
    int best = 0;
    double best_score = 1e30;
    for (int64_t S = 1; S <= std::min<int64_t>(gpi, 8); ++S) {
        if (gpi % S != 0) continue;
        const int64_t W = items * S, per = (W + G - 1) / G;  // the most units (items) a block's range holds
        if (per * runs > static_cast<int64_t>(kSlotTiles) * kMaxK) break;
        // At least one full slot a chunk where the shapes allow (a ring of small slots streams too little).
        if (per * runs < kSlotTiles && (items * gpi + G - 1) / G * runs >= kSlotTiles && S < gpi) {
            bool later = false;  // a larger divisor reaches a full slot within the position limit
            for (int64_t S2 = S + 1; S2 <= std::min<int64_t>(gpi, 8); ++S2) {
                const int64_t per2 = (items * S2 + G - 1) / G * runs;
                if (gpi % S2 == 0 && per2 >= kSlotTiles && per2 <= static_cast<int64_t>(kSlotTiles) * kMaxK) later = true;
            }
            if (later) continue;
        }
        const double score = static_cast<double>(per) * G / static_cast<double>(W);
        if (score < best_score - 0.005) best = static_cast<int>(S), best_score = score;
    }
    return best;
}

struct Plan {
    int G = 0, SA = 0, SB = 0, nslots = 0;
    size_t smem = 0, partial_bytes = 0;
    int counters = 0;
};

Plan plan(int64_t D, int64_t I) {
    Plan p;
    p.G = sm_count();
    if (p.G < 1 || D % 128 != 0 || I % 128 != 0) return p;
    p.SA = segments(I / 16, D / 128, 2, p.G);
    p.SB = segments(D / 16, I / 128, 1, p.G);
    // As many ring slots as shared memory holds, up to kMaxSlots (the ring is most of the bytes in flight).
    // (2 KB kept back: the kernel's own static shared memory and the system's reservation, which the opt-in limit
    // may not cover on every driver.)
    const size_t fixed = ring_offset(static_cast<int>(D), static_cast<int>(I)) + 2048;
    p.nslots = max_smem() > fixed ? static_cast<int>(std::min<size_t>(kMaxSlots, (max_smem() - fixed) / kSlotBytes)) : 0;
    p.smem = fixed + static_cast<size_t>(p.nslots) * kSlotBytes;
    p.partial_bytes = static_cast<size_t>(p.SA * (I / 16) * 32 + p.SB * (D / 16) * 16) * sizeof(float);
    p.counters = static_cast<int>(I / 16 + D / 16 + 2);
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
    if (!device_is_hopper() || gate_up.N != 2 * I || down.N != D || D % 128 != 0 || I % 128 != 0) return false;
    // 128-channel scale groups (two chunks) and 16-row tiles inside one scale row.
    if (gate_up.bk != 128 || down.bk != 128 || gate_up.bn % 16 != 0 || down.bn % 16 != 0) return false;
    if (gate_up.SG != D / 128 || down.SG != I / 128) return false;
    const Plan p = plan(D, I);
    return p.G >= 8 && p.SA > 0 && p.SB > 0 && p.nslots >= 4 && p.smem <= max_smem();
}

void mlp_fp8(const Fp8Dev& gate_up, const Fp8Dev& down, const Tensor& x, Tensor& h, Tensor& y,
             const QmmWorkspace& ws, cudaStream_t s) {
    mlp_fp8_variant(gate_up, down, x, h, y, ws, s, true);
}

void mlp_fp8_variant(const Fp8Dev& gate_up, const Fp8Dev& down, const Tensor& x, Tensor& h, Tensor& y,
                     const QmmWorkspace& ws, cudaStream_t s, bool math, int segs_a, int segs_b,
                     unsigned long long* trace) {
    if (!mlp_fp8_ok(gate_up, down)) throw Error("cuda mlp_fp8: weights this kernel does not take (mlp_fp8_ok)");
    const int64_t D = gate_up.K, I = down.K;
    if (x.dtype != DType::BF16 || h.dtype != DType::BF16 || y.dtype != DType::BF16 || x.numel() != D ||
        y.numel() != D || h.numel() != I)
        throw Error("cuda mlp_fp8: x [1, D], h [1, I] and y [1, D] must be BF16 (D " + std::to_string(D) +
                    ", I " + std::to_string(I) + ")");
    Plan p = plan(D, I);
    // Forced segments must divide the groups and keep a block's positions within the warps' registers.
    auto fits = [&](int64_t items, int64_t gpi, int runs, int S) {
        return gpi % S == 0 && (items * S + p.G - 1) / p.G * runs <= static_cast<int64_t>(kSlotTiles) * kMaxK;
    };
    if (segs_a > 0) {
        if (!fits(I / 16, D / 128, 2, segs_a)) throw Error("cuda mlp_fp8: segs_a does not fit");
        p.SA = segs_a;
    }
    if (segs_b > 0) {
        if (!fits(D / 16, I / 128, 1, segs_b)) throw Error("cuda mlp_fp8: segs_b does not fit");
        p.SB = segs_b;
    }
    p.partial_bytes = static_cast<size_t>(p.SA * (I / 16) * 32 + p.SB * (D / 16) * 16) * sizeof(float);
    if (!ws.partials || !ws.counters || ws.partial_bytes < p.partial_bytes || ws.n_counters < p.counters)
        throw Error("cuda mlp_fp8: workspace too small (reserve mlp_fp8_workspace_need)");
    MlpArgs a{};
    auto* cnt = reinterpret_cast<unsigned*>(ws.counters);
    StageArgs& A = a.st[0];
    A.words = gate_up.words, A.scales = gate_up.scales;
    A.NT = static_cast<int>(gate_up.NT), A.KC = static_cast<int>(gate_up.KC);
    A.bn = static_cast<int>(gate_up.bn), A.SG = static_cast<int>(gate_up.SG);
    A.items = static_cast<int>(I / 16), A.runs = 2, A.run_off = static_cast<int>(I / 16);
    A.segs = p.SA, A.gps = static_cast<int>(D / 128 / p.SA);
    A.part = ws.partials, A.cnt = cnt;
    StageArgs& B = a.st[1];
    B.words = down.words, B.scales = down.scales;
    B.NT = static_cast<int>(down.NT), B.KC = static_cast<int>(down.KC);
    B.bn = static_cast<int>(down.bn), B.SG = static_cast<int>(down.SG);
    B.items = static_cast<int>(D / 16), B.runs = 1, B.run_off = 0;
    B.segs = p.SB, B.gps = static_cast<int>(I / 128 / p.SB);
    B.part = ws.partials + static_cast<size_t>(p.SA) * (I / 16) * 32, B.cnt = cnt + I / 16;
    a.bar = cnt + I / 16 + D / 16;
    a.x = static_cast<const __nv_bfloat16*>(x.data);
    a.h = static_cast<__nv_bfloat16*>(h.data), a.y = static_cast<__nv_bfloat16*>(y.data);
    a.D = static_cast<int>(D), a.I = static_cast<int>(I), a.G = p.G, a.trace = trace, a.nslots = p.nslots;
    auto launch = [&](auto kernel) {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(p.smem));
        launch_pdl(kernel, dim3(static_cast<unsigned>(p.G)), dim3(kThreads), p.smem, s, a);
    };
    math ? launch(mlp_fp8_kernel<true>) : launch(mlp_fp8_kernel<false>);
    check_launch("mlp_fp8");
}

}  // namespace grimoire::cuda
