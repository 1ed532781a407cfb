// Split-K flash-decoding for one query token against the KV cache, or for a few (T <= 8: a verify step), each
// token t a grid z-slice with its own length positions[t] + 1 (so the causal mask is the length).
//
// Kernel 1, grid (Hkv, kMaxSplits), 4 warps: block (kvh, split) handles cache rows [k0, k1) of its split for
// all G = Hq/Hkv query heads of that KV head, so each K/V row is read once per step whatever G is. A lane
// owns D/32 consecutive dims; each warp walks every 4th row, two rows per iteration, with an online softmax
// per head; the 4 warps are merged in shared memory and the split writes (max, sum, unnormalised acc) to the
// workspace (decode_tile_kernel with G = 6 or 8: two blocks per (kvh, split), each with half the query heads;
// see launch_tile; decode_tc_kernel: the same split on tensor cores, taken where it applies: BF16 caches and
// query, head_dim 128 / 256, G <= 8). Blocks past the device-computed split count return at once. Kernel 2, one
// block per query head, merges the splits (and, for gated attention, applies the sigmoid output gate).
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention_impl.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fused_util.cuh"

namespace grimoire::cuda::attn {

namespace {
constexpr int kWarps = 4;
constexpr int kMaxG = 8;
constexpr int kRows = 2;  // K/V rows each warp scores per iteration (the code below is written for 2)

struct DecodeParams {
    const void* q;        // [T, Hq, D]
    const void* k_cache;  // [max_ctx, Hkv, D]
    const void* v_cache;  // [max_ctx, Hkv, D]
    float* ws;            // acc [Hq, kMaxSplits, D] then (max, sum) [Hq, kMaxSplits, 2]; token t owns the
                          // slots [t * max_splits, (t + 1) * max_splits) of each head
    void* out;            // [T, Hq, D]
    int q_dt, o_dt, G;
    int64_t Hq, Hkv, D, n_past;
    const int* n_past_dev;  // null, or token t's n_past at [t] (the positions of gated attention)
    float scale;
    const void* gate;  // null, or [T, Hq, gate_stride]: out = round(out) * sigmoid(gate) (gated attention)
    int gate_dt;
    int64_t gate_stride;
    int max_splits;  // kMaxSplits / T
    int n_tok;       // T
    int hsplit;      // decode_tile_kernel: blocks per KV head, each taking G / hsplit of its query heads
    // decode_tc_kernel: the predecessor kernel is the one that wrote this step's cache rows (gated attention's
    // prep), so rows before the first token's position may be read before the programmatic-launch wait.
    int prewait;
    int min_keys;  // rows per split at least (num_splits): kMinKeysPerSplit, or the tensor-core walk's own
    int ahead;     // the merge lets its dependent (o_proj) launch before its own wait (common.cuh
                   // pdl_enter_ahead)
};

template <int EPL>
__device__ __forceinline__ void load_row(const __nv_bfloat16* p, float* f) {
    if constexpr (EPL == 8) {
        load_bf16x8(p, f);
    } else if constexpr (EPL == 4) {
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const float2 t = __bfloat1622float2(h[i]);
            f[2 * i] = t.x;
            f[2 * i + 1] = t.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < EPL; ++i) f[i] = __bfloat162float(p[i]);
    }
}
template <int EPL>
__device__ __forceinline__ void load_row(const float* p, float* f) {
#pragma unroll
    for (int i = 0; i < EPL; ++i) f[i] = p[i];
}

// Token blockIdx.z's length and split count.
__device__ __forceinline__ int64_t current_len(const DecodeParams& p) {
    const int t = static_cast<int>(blockIdx.z);
    return (p.n_past_dev ? p.n_past_dev[t] : p.n_past + t) + 1;
}
// GRIMOIRE_DECODE_TILE=0: the lane-per-dim kernel for every shape (for comparison).
bool tile_disabled() {
    static const bool off = [] {
        const char* v = std::getenv("GRIMOIRE_DECODE_TILE");
        return v && std::string(v) == "0";
    }();
    return off;
}
__device__ __forceinline__ int splits_for(const DecodeParams& p, int64_t len) {
    const int n = num_splits(len, p.min_keys);
    return n < p.max_splits ? n : p.max_splits;
}

// Token blockIdx.z's cache rows [k0, k1) for split blockIdx.y and its workspace slot; false for a split past
// the token's split count (the grid is sized for the most).
struct SplitRange {
    int64_t tok, slot, k0, k1;
};
__device__ __forceinline__ bool split_range(const DecodeParams& p, SplitRange& r) {
    const int64_t L = current_len(p);
    const int ns = splits_for(p, L), split = static_cast<int>(blockIdx.y);
    if (split >= ns) return false;
    const int64_t per = (L + ns - 1) / ns;
    r.tok = blockIdx.z;
    r.slot = r.tok * p.max_splits + split;
    r.k0 = split * per;
    r.k1 = r.k0 + per < L ? r.k0 + per : L;
    return true;
}

// After the block's barrier: joins the kWarps partial softmax states of the block's G heads h0 .. h0 + G - 1
// (warp w's head g accumulator at sm_acc[(w * ng + g) * D], its max and sum at sm_m / sm_l[w * ng + g]) into
// workspace slot `slot` of each head.
__device__ __forceinline__ void store_split(const DecodeParams& p, const float* sm_acc, const float* sm_m,
                                            const float* sm_l, int ng, int G, int64_t D, int64_t h0, int64_t slot) {
    float* ws_acc = p.ws;
    float* ws_ml = p.ws + p.Hq * kMaxSplits * D;
    for (int g = 0; g < G; ++g) {
        float M = -INFINITY;
        for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm_m[w * ng + g]);
        const int64_t h = h0 + g;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
            float v = 0.0f;
            for (int w = 0; w < kWarps; ++w)
                if (sm_m[w * ng + g] != -INFINITY) v += __expf(sm_m[w * ng + g] - M) * sm_acc[(w * ng + g) * D + d];
            ws_acc[(h * kMaxSplits + slot) * D + d] = v;
        }
        if (threadIdx.x == 0) {
            float Ls = 0.0f;
            for (int w = 0; w < kWarps; ++w)
                if (sm_m[w * ng + g] != -INFINITY) Ls += __expf(sm_m[w * ng + g] - M) * sm_l[w * ng + g];
            ws_ml[(h * kMaxSplits + slot) * 2] = M;
            ws_ml[(h * kMaxSplits + slot) * 2 + 1] = Ls;
        }
    }
}
}  // namespace

template <class CT, int EPL>
static __global__ void __launch_bounds__(32 * kWarps) decode_split_kernel(DecodeParams p) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    __shared__ float sm_acc[kWarps][kMaxG][EPL * 32];
    __shared__ float sm_m[kWarps][kMaxG], sm_l[kWarps][kMaxG];
    __shared__ float sm_q[kMaxG][EPL * 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t kvh = blockIdx.x;
    SplitRange sr;
    if (!split_range(p, sr)) return;
    const int64_t tok = sr.tok, k0 = sr.k0, k1 = sr.k1;
    const int G = p.G;
    const int64_t D = p.D, row = p.Hkv * D;

    // The scaled query heads live in shared memory (each lane reads only its own EPL dims), which leaves the
    // registers to the accumulators and to kRows rows of K and V in flight per warp. Dim lane * EPL + e is
    // stored at [e * 32 + lane], so the 32 lanes' reads of one e hit 32 banks: the natural layout made every
    // read an 8-way bank conflict, which set the speed of the whole walk (H200, 32K: 0.21 ms per layer).
    for (int i = threadIdx.x; i < G * EPL * 32; i += blockDim.x) {
        const int g = i / (EPL * 32), d = i % (EPL * 32);
        sm_q[g][(d % EPL) * 32 + d / EPL] = ld(p.q, p.q_dt, ((tok * p.Hq) + kvh * G + g) * D + d) * p.scale;
    }
    __syncthreads();
    float acc[kMaxG][EPL], m[kMaxG], l[kMaxG];
#pragma unroll
    for (int g = 0; g < kMaxG; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[g][e] = 0.0f;
    }
    const CT* kc = static_cast<const CT*>(p.k_cache) + kvh * D + lane * EPL;
    const CT* vc = static_cast<const CT*>(p.v_cache) + kvh * D + lane * EPL;
    // A warp scores rows j and j + kWarps together while the next two are loading: the walk is latency-bound,
    // so the rows in flight per warp set its speed.
    constexpr int64_t kStep = kRows * kWarps;
    float kn[kRows][EPL], vn[kRows][EPL];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int64_t jr = k0 + warp + r * kWarps;
#pragma unroll
        for (int e = 0; e < EPL; ++e) kn[r][e] = vn[r][e] = 0.0f;
        if (jr < k1) {
            load_row<EPL>(kc + jr * row, kn[r]);
            load_row<EPL>(vc + jr * row, vn[r]);
        }
    }
    for (int64_t j = k0 + warp; j < k1; j += kStep) {
        float kr[kRows][EPL], vr[kRows][EPL];
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int e = 0; e < EPL; ++e) {
                kr[r][e] = kn[r][e];
                vr[r][e] = vn[r][e];
            }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const int64_t jn = j + kStep + r * kWarps;
            if (jn < k1) {
                load_row<EPL>(kc + jn * row, kn[r]);
                load_row<EPL>(vc + jn * row, vn[r]);
            }
        }
        const bool has1 = j + kWarps < k1;  // row j itself always exists
#pragma unroll
        for (int g = 0; g < kMaxG; ++g) {
            if (g < G) {
                float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
                for (int e = 0; e < EPL; ++e) {
                    const float qe = sm_q[g][e * 32 + lane];
                    s0 += qe * kr[0][e];
                    s1 += qe * kr[1][e];
                }
                s0 = warp_sum(s0);
                s1 = has1 ? warp_sum(s1) : -INFINITY;
                const float mn = fmaxf(m[g], fmaxf(s0, s1));
                const float corr = __expf(m[g] - mn), p0 = __expf(s0 - mn), p1 = __expf(s1 - mn);
                l[g] = l[g] * corr + p0 + p1;
#pragma unroll
                for (int e = 0; e < EPL; ++e) acc[g][e] = acc[g][e] * corr + p0 * vr[0][e] + p1 * vr[1][e];
                m[g] = mn;
            }
        }
    }
#pragma unroll
    for (int g = 0; g < kMaxG; ++g) {
        if (g < G) {
#pragma unroll
            for (int e = 0; e < EPL; ++e) sm_acc[warp][g][lane * EPL + e] = acc[g][e];
            if (lane == 0) {
                sm_m[warp][g] = m[g];
                sm_l[warp][g] = l[g];
            }
        }
    }
    __syncthreads();
    store_split(p, &sm_acc[0][0][0], &sm_m[0][0], &sm_l[0][0], kMaxG, G, D, kvh * G, sr.slot);
}

// One block of kCombineThreads per query head. The split weights exp(m_s - M) / sum are computed once into
// shared memory; then thread (d, group) sums every n_groups-th split of dim d, so a long context's 128 splits
// are read by several independent load streams instead of one serial walk per dim (the serial merge was a
// fifth of a 32K decode-attention call).
constexpr int kCombineThreads = 512;
static __global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(DecodeParams p) {
    __shared__ float wgt[kMaxSplits];
    __shared__ float part[kCombineThreads];
    __shared__ float red[32];
    const int64_t h = blockIdx.x, D = p.D, tok = blockIdx.z, slot0 = tok * p.max_splits;
    const int tid = threadIdx.x;
    // Before the programmatic-launch wait, what no kernel of the chain's last two wrote: the length (filled at
    // the step's start) and the gate (the q projection's output, complete before the prep kernel ran). After
    // it, the split maxima, sums and the thread's first kPre partial rows in one round: the chain was four
    // dependent loads (length, maxima, partials, gate) after the wait. Same summation order.
    const int ns = splits_for(p, current_len(p));
    float gv = 0.0f;
    if (p.gate && tid < D) gv = ld(p.gate, p.gate_dt, (tok * p.Hq + h) * p.gate_stride + tid);
    pdl_enter_ahead(p.ahead);  // launched through launch_pdl (common.cuh)
    const float* ws_acc = p.ws + (h * kMaxSplits + slot0) * D;
    const float* ws_ml = p.ws + p.Hq * kMaxSplits * D + (h * kMaxSplits + slot0) * 2;
    const int groups = static_cast<int>(kCombineThreads / D);
    const int64_t d = tid % D;
    const int g = static_cast<int>(tid / D);
    constexpr int kPre = 4;
    float pre[kPre];
#pragma unroll
    for (int i = 0; i < kPre; ++i) {
        const int sp = g + i * groups;
        pre[i] = g < groups && sp < ns ? ws_acc[sp * D + d] : 0.0f;
    }
    const float ms = tid < ns ? ws_ml[2 * tid] : -INFINITY, ls = tid < ns ? ws_ml[2 * tid + 1] : 0.0f;
    // Block max over the split maxima (kMaxSplits <= kCombineThreads: one split per thread).
    float M = warp_max(ms);
    if ((tid & 31) == 0) red[tid >> 5] = M;
    __syncthreads();
    M = red[0];
    for (int w = 1; w < kCombineThreads / 32; ++w) M = fmaxf(M, red[w]);
    const float e = tid < ns ? __expf(ms - M) : 0.0f;
    const float den = block_sum(tid < ns ? e * ls : 0.0f, red);
    if (tid < ns) wgt[tid] = e / den;
    __syncthreads();
    float v = 0.0f;
    if (g < groups) {
#pragma unroll
        for (int i = 0; i < kPre; ++i) {
            const int sp = g + i * groups;
            if (sp < ns) v += wgt[sp] * pre[i];
        }
#pragma unroll 8
        for (int sp = g + kPre * groups; sp < ns; sp += groups) v += wgt[sp] * ws_acc[sp * D + d];
    }
    part[tid] = v;
    __syncthreads();
    if (tid < D) {
        float o = 0.0f;
        for (int q = 0; q < groups; ++q) o += part[q * D + tid];
        if (p.gate) o = round_as(p.o_dt, o) * sigmoidf_(gv);
        st(p.out, p.o_dt, (tok * p.Hq + h) * D + tid, o);
    }
}


// BF16 caches, head_dim 128 / 256, G known at compile time: the same split, walked in tiles of 8 rows per warp
// with the work laid out so no (row, head) score needs a 32-lane reduction. Scores: lane (r, part) = (lane / 4,
// lane % 4) dots row r's dims {c * 32 + part * 8 + [0, 8)} with every head (16-byte K loads, 4 lanes cover 64
// contiguous bytes of a row), then 2 shuffles join the 4 parts. Softmax per tile: 3 shuffles per head for the
// max and the sum over the 8 rows. P V: lane owns dims lane * EPL + [0, EPL) (the V row's coalesced load) and
// takes each row's probability by one shuffle. The V rows of a tile are loaded with its K slice, so they
// arrive while the scores are computed. (The lane-per-dim walk above spent a 5-level shuffle reduction on
// every (row, head): 56 M instructions for a 32K 27B layer, 0.22 ms, ~600 GB/s.)
template <int EPL>
struct RawRow;  // a lane's EPL BF16 values of a V row
template <>
struct RawRow<8> {
    uint4 u;
};
template <>
struct RawRow<4> {
    uint2 u;
};
template <int N, class U>
__device__ __forceinline__ void bf16_to_f(const U& u, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
        const float2 t = __bfloat1622float2(h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

constexpr int kTileRows = 8;
template <int EPL, int G>
static __global__ void __launch_bounds__(32 * kWarps, 3) decode_tile_kernel(DecodeParams p) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    constexpr int D = 32 * EPL;
    __shared__ __align__(16) float sm_q[G][D];
    __shared__ float sm_acc[kWarps][G][D];
    __shared__ float sm_m[kWarps][G], sm_l[kWarps][G];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // Block x: KV head x / hsplit, its query heads h0 .. h0 + G - 1 (G = p.G / hsplit).
    const int64_t kvh = blockIdx.x / p.hsplit, h0 = kvh * p.G + (blockIdx.x % p.hsplit) * G;
    SplitRange sr;
    if (!split_range(p, sr)) return;
    const int64_t tok = sr.tok, k0 = sr.k0, k1 = sr.k1;
    const int64_t row = p.Hkv * D;
    for (int i = threadIdx.x; i < G * D; i += blockDim.x)
        sm_q[i / D][i % D] = ld(p.q, p.q_dt, (tok * p.Hq + h0) * D + i) * p.scale;
    __syncthreads();
    const __nv_bfloat16* kc = static_cast<const __nv_bfloat16*>(p.k_cache) + kvh * D;
    const __nv_bfloat16* vc = static_cast<const __nv_bfloat16*>(p.v_cache) + kvh * D;
    const int rr = lane >> 2, part = lane & 3;
    float acc[G][EPL], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[g][e] = 0.0f;
    }
    for (int64_t r0 = k0 + warp * kTileRows; r0 < k1; r0 += kWarps * kTileRows) {
        const int nrow = static_cast<int>(k1 - r0 < kTileRows ? k1 - r0 : kTileRows);  // >= 1, warp-uniform
        const bool rv = rr < nrow;
        RawRow<EPL> vraw[kTileRows];
#pragma unroll
        for (int r = 0; r < kTileRows; ++r)
            if (r < nrow) vraw[r].u = *reinterpret_cast<const decltype(vraw[r].u)*>(vc + (r0 + r) * row + lane * EPL);
        uint4 kraw[EPL];
#pragma unroll
        for (int c = 0; c < EPL; ++c)
            kraw[c] = rv ? *reinterpret_cast<const uint4*>(kc + (r0 + rr) * row + c * 32 + part * 8)
                         : make_uint4(0, 0, 0, 0);
        float sc[G];
#pragma unroll
        for (int g = 0; g < G; ++g) sc[g] = 0.0f;
#pragma unroll
        for (int c = 0; c < EPL; ++c) {
            float kf[8];
            bf16_to_f<8>(kraw[c], kf);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const float4 qa = *reinterpret_cast<const float4*>(&sm_q[g][c * 32 + part * 8]);
                const float4 qb = *reinterpret_cast<const float4*>(&sm_q[g][c * 32 + part * 8 + 4]);
                sc[g] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] + qb.y * kf[5] +
                         qb.z * kf[6] + qb.w * kf[7];
            }
        }
        float pr[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float s = sc[g];
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            if (!rv) s = -INFINITY;
            float mt = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, 4));
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 8));
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 16));
            const float mn = fmaxf(m[g], mt);  // finite: row 0 of the tile exists
            const float corr = __expf(m[g] - mn);
            pr[g] = __expf(s - mn);
            float ps = pr[g] + __shfl_xor_sync(0xffffffffu, pr[g], 4);
            ps += __shfl_xor_sync(0xffffffffu, ps, 8);
            ps += __shfl_xor_sync(0xffffffffu, ps, 16);
            l[g] = l[g] * corr + ps;
            m[g] = mn;
#pragma unroll
            for (int e = 0; e < EPL; ++e) acc[g][e] *= corr;
        }
#pragma unroll
        for (int r = 0; r < kTileRows; ++r) {
            if (r < nrow) {
                float vf[EPL];
                bf16_to_f<EPL>(vraw[r].u, vf);
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    const float pg = __shfl_sync(0xffffffffu, pr[g], r * 4);
#pragma unroll
                    for (int e = 0; e < EPL; ++e) acc[g][e] += pg * vf[e];
                }
            }
        }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int e = 0; e < EPL; ++e) sm_acc[warp][g][lane * EPL + e] = acc[g][e];
        if (lane == 0) {
            sm_m[warp][g] = m[g];
            sm_l[warp][g] = l[g];
        }
    }
    __syncthreads();
    store_split(p, &sm_acc[0][0][0], &sm_m[0][0], &sm_l[0][0], G, G, D, h0, sr.slot);
}

// BF16 caches and query, head_dim 128 / 256, G <= 8: the same split walked on tensor cores (mma.sync m16n8k16,
// f32 accumulate), a warp per 16-key tile. The tile kernel above spends ~1,200 dependent FMA / shuffle
// instructions per 8-row tile at G = 6; here a 16-key tile is 2 x D / 16 mma for the scores and 2 x D / 16
// for P V (docs/BENCHMARKS.md, session 19).
//   * Scores S [heads x keys] = Q K^T: A = Q (head g in row g; rows 8..15 empty), B = K^T, one n8 tile per 8
//     keys. The k index of a fragment is mapped to dims so that lane (g, t) reads 16 contiguous bytes of key
//     g's row: within each 32-dim group, fragment columns 2t, 2t + 1 of the even k-step are dims 8t, 8t + 1,
//     columns 2t + 8, 2t + 9 dims 8t + 2, 8t + 3, and the odd k-step the next four; Q is read the same way, so
//     every product of the dot product is formed once (the order of the f32 sums is the mma's).
//   * S's accumulator layout (lane (g, t): head g, keys 2t, 2t + 1 of each n8 tile) is the B operand of
//     O^T [dims x heads] += V^T P^T, so P never leaves the registers. P is fed as BF16 hi + lo parts (two mma),
//     ~16 bits of each probability, near the f32 products of the other kernels.
//   * V^T as A: lane group g owns dims [g D / 8, (g + 1) D / 8); m-tile i's rows g / g + 8 are its dims 2i /
//     2i + 1, so each of the 4 key rows it needs (keys 2t, 2t + 1, 2t + 8, 2t + 9) is one contiguous D / 8-dim
//     load and a fragment register is one byte permute of two of them.
//   * Online softmax per head in f32 (scores scaled after the mma), keys past the split masked, rows past the
//     length loaded as zeros (never the cache's stale values).
template <int EPL, int KT>
static __global__ void __launch_bounds__(32 * kWarps) decode_tc_kernel(DecodeParams p) {
    constexpr int D = 32 * EPL, NP = D / 32, MT = D / 16, VU = D / 64;  // VU: 16-byte V loads per key row
    constexpr int kKeys = 8 * KT;  // KT n8 tiles of keys per warp tile (1: P V's keys 8..15 are zeros)
    __shared__ float sm_acc[kWarps][kMaxG][D];
    __shared__ float sm_m[kWarps][kMaxG], sm_l[kWarps][kMaxG];
    __shared__ uint4 sm_q[kMaxG][D / 8 + 1];
    // p.prewait: the length (filled at the step's start) and the cache rows of earlier steps are complete
    // before this kernel's predecessor ran (it passed its own wait before letting this one launch), so the
    // first tile's rows before this step's first position are loaded before the wait; the rows the
    // predecessor wrote, after it.
    if (!p.prewait) pdl_enter();  // launched through launch_pdl (common.cuh)
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t kvh = blockIdx.x;
    SplitRange sr;
    if (!split_range(p, sr)) return;
    const int64_t fresh = !p.prewait ? 0 : p.n_past_dev ? p.n_past_dev[0] : p.n_past;  // rows this step wrote
    const int G = p.G;
    const int64_t row = p.Hkv * D;
    const uint4 zero4 = make_uint4(0u, 0u, 0u, 0u);
    const __nv_bfloat16* kc = static_cast<const __nv_bfloat16*>(p.k_cache) + kvh * D;
    const __nv_bfloat16* vc = static_cast<const __nv_bfloat16*>(p.v_cache) + kvh * D + g * (D / 8);
    float acc[MT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    float m = -INFINITY, l = 0.0f;  // head g's running max and sum
    // The tile's K rows (key 8j + g, dims 32pp + 8t ..) and V rows (keys 2t, 2t + 1, 8 + 2t, 9 + 2t, the lane
    // group's dims); rows past the split as zeros. The next tile's are loaded while this one is computed.
    uint4 kf[KT][NP], vf[2 * KT][VU];
    // mode 0: every row of the tile; 1: the rows before `fresh` (zeros for the others); 2: only the rows from
    // `fresh` on (the others keep their values).
    auto load_tile = [&](int64_t r0, int mode) {
        const int nrow = static_cast<int>(sr.k1 - r0 < kKeys ? sr.k1 - r0 : kKeys);
        auto take = [&](int key) { return mode == 0 || (mode == 1) == (r0 + key < fresh); };
#pragma unroll
        for (int j = 0; j < KT; ++j) {
            const int key = 8 * j + g;
            if (mode == 2 && !(key < nrow && take(key))) continue;
#pragma unroll
            for (int pp = 0; pp < NP; ++pp)
                kf[j][pp] = key < nrow && take(key)
                                ? *reinterpret_cast<const uint4*>(kc + (r0 + key) * row + 32 * pp + 8 * t)
                                : zero4;
        }
#pragma unroll
        for (int kk = 0; kk < 2 * KT; ++kk) {
            const int key = 2 * t + (kk & 1) + 8 * (kk >> 1);
            if (mode == 2 && !(key < nrow && take(key))) continue;
#pragma unroll
            for (int u = 0; u < VU; ++u)
                vf[kk][u] = key < nrow && take(key) ? *reinterpret_cast<const uint4*>(vc + (r0 + key) * row + 8 * u)
                                                    : zero4;
        }
    };
    constexpr int64_t kStride = kWarps * kKeys;
    const int64_t first = sr.k0 + warp * kKeys;
    if (p.prewait) {
        if (first < sr.k1) load_tile(first, 1);
        pdl_enter();
        if (first < sr.k1 && first + kKeys > fresh) load_tile(first, 2);
    } else if (first < sr.k1) {
        load_tile(first, 0);  // in flight while q is staged
    }
    // The block's query heads (BF16, zeros past G) in shared memory, rows padded by 16 bytes so that the 8 lane
    // groups' 16-byte reads of one column fall in different banks; a lane reads its A fragments per tile
    // (held in registers they spilled at head_dim 256).
    for (int i = static_cast<int>(threadIdx.x); i < kMaxG * D / 8; i += 32 * kWarps) {
        const int h = i / (D / 8), c = i - h * (D / 8);
        sm_q[h][c] = h < G ? *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.q) +
                                                              (sr.tok * p.Hq + kvh * G + h) * D + 8 * c)
                           : zero4;
    }
    __syncthreads();
    const uint4* qrow = &sm_q[g][t];
    for (int64_t r0 = sr.k0 + warp * kKeys; r0 < sr.k1; r0 += kStride) {
        const int nrow = static_cast<int>(sr.k1 - r0 < kKeys ? sr.k1 - r0 : kKeys);  // >= 1
        // Scores: the even and odd k-steps in two accumulators (two dependent mma chains of D / 32).
        float s[2][4] = {}, s2[2][4] = {};
#pragma unroll
        for (int j = 0; j < KT; ++j) {
#pragma unroll
            for (int pp = 0; pp < NP; ++pp) {
                const uint4 qf = qrow[4 * pp];  // head g, dims 32pp + 8t .. 32pp + 8t + 7
                mma16816(s[j], qf.x, 0u, qf.y, 0u, kf[j][pp].x, kf[j][pp].y);
                mma16816(s2[j], qf.z, 0u, qf.w, 0u, kf[j][pp].z, kf[j][pp].w);
            }
        }
#pragma unroll
        for (int j = 0; j < KT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] += s2[j][e];
        // This tile's V rows, before the next tile's loads take their registers.
        uint4 vc_t[2 * KT][VU];
#pragma unroll
        for (int kk = 0; kk < 2 * KT; ++kk)
#pragma unroll
            for (int u = 0; u < VU; ++u) vc_t[kk][u] = vf[kk][u];
        if (r0 + kStride < sr.k1) load_tile(r0 + kStride, 0);
        // Head g's scores of keys 2t, 2t + 1, 8 + 2t, 9 + 2t.
        float sv[4] = {s[0][0], s[0][1], s[1][0], s[1][1]};
        float mx = -INFINITY;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int key = 2 * t + (e & 1) + 8 * (e >> 1);
            sv[e] = key < nrow ? sv[e] * p.scale : -INFINITY;
            mx = fmaxf(mx, sv[e]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(m, mx);  // finite: key 0 of the tile exists
        const float corr = __expf(m - mn);
        float pv[4], ps = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; ++e) pv[e] = __expf(sv[e] - mn), ps += pv[e];
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        ps += __shfl_xor_sync(0xffffffffu, ps, 2);
        l = l * corr + ps;
        m = mn;
        // acc's columns are heads 2t, 2t + 1: their factors live in lanes 8t and 8t + 4.
        const float ca = __shfl_sync(0xffffffffu, corr, 8 * t), cb = __shfl_sync(0xffffffffu, corr, 8 * t + 4);
        uint32_t bh[2], bl[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const __nv_bfloat162 hi = __floats2bfloat162_rn(pv[2 * h], pv[2 * h + 1]);
            const float2 hf = __bfloat1622float2(hi);
            const __nv_bfloat162 lo = __floats2bfloat162_rn(pv[2 * h] - hf.x, pv[2 * h + 1] - hf.y);
            bh[h] = *reinterpret_cast<const uint32_t*>(&hi);
            bl[h] = *reinterpret_cast<const uint32_t*>(&lo);
        }
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            acc[i][0] *= ca, acc[i][1] *= cb, acc[i][2] *= ca, acc[i][3] *= cb;
            auto word = [&](int kk) {
                if (kk >= 2 * KT) return 0u;
                const uint4& u = vc_t[kk][i >> 2];
                const int c = i & 3;
                return c == 0 ? u.x : c == 1 ? u.y : c == 2 ? u.z : u.w;
            };
            const uint32_t a0 = __byte_perm(word(0), word(1), 0x5410), a1 = __byte_perm(word(0), word(1), 0x7632);
            const uint32_t a2 = __byte_perm(word(2), word(3), 0x5410), a3 = __byte_perm(word(2), word(3), 0x7632);
            mma16816(acc[i], a0, a1, a2, a3, bh[0], bh[1]);
            mma16816(acc[i], a0, a1, a2, a3, bl[0], bl[1]);
        }
    }
    if (t == 0 && g < G) sm_m[warp][g] = m, sm_l[warp][g] = l;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        const int d0 = g * (D / 8) + 2 * i;
        if (2 * t < G) sm_acc[warp][2 * t][d0] = acc[i][0], sm_acc[warp][2 * t][d0 + 1] = acc[i][2];
        if (2 * t + 1 < G) sm_acc[warp][2 * t + 1][d0] = acc[i][1], sm_acc[warp][2 * t + 1][d0 + 1] = acc[i][3];
    }
    __syncthreads();
    store_split(p, &sm_acc[0][0][0], &sm_m[0][0], &sm_l[0][0], kMaxG, G, D, kvh * G, sr.slot);
}

// GRIMOIRE_DECODE_PREWAIT=0: the tensor-core walk loads nothing before the programmatic-launch wait (the A/B).
bool prewait_enabled() {
    static const bool on = [] {
        const char* v = std::getenv("GRIMOIRE_DECODE_PREWAIT");
        return !(v && std::string(v) == "0");
    }();
    return on && pdl_enabled();
}

// GRIMOIRE_DECODE_TC=0: the FMA walks (decode_tile_kernel) where the tensor-core one applies (for comparison).
bool tc_disabled() {
    static const bool off = [] {
        const char* v = std::getenv("GRIMOIRE_DECODE_TC");
        return v && std::string(v) == "0";
    }();
    return off;
}

// GRIMOIRE_DECODE_HSPLIT=0: one block per KV head and split for every G (for comparison).
bool hsplit_disabled() {
    static const bool off = [] {
        const char* v = std::getenv("GRIMOIRE_DECODE_HSPLIT");
        return v && std::string(v) == "0";
    }();
    return off;
}

// G = 6 and 8 as two blocks of G / 2 heads per KV head and split: a warp's tile is a chain of ~1,200 dependent
// instructions at G = 6 (every head's q.k and p.v) with two warps per SM at length 512, so the walk is
// latency-bound on its own arithmetic (docs/BENCHMARKS.md, session 14); halving the heads per warp halves the
// chain and doubles the warps, for a second read of the same K / V rows (L2).
template <int EPL>
static bool launch_tile(DecodeParams p, dim3 grid, cudaStream_t s) {
    if (!hsplit_disabled() && (p.G == 6 || p.G == 8)) {
        p.hsplit = 2;
        grid.x *= 2;
        if (p.G == 6)
            launch_pdl(decode_tile_kernel<EPL, 3>, grid, dim3(32 * kWarps), 0, s, p);
        else
            launch_pdl(decode_tile_kernel<EPL, 4>, grid, dim3(32 * kWarps), 0, s, p);
        return true;
    }
    switch (p.G) {
        case 1:
            launch_pdl(decode_tile_kernel<EPL, 1>, grid, dim3(32 * kWarps), 0, s, p);
            return true;
        case 2:
            launch_pdl(decode_tile_kernel<EPL, 2>, grid, dim3(32 * kWarps), 0, s, p);
            return true;
        case 4:
            launch_pdl(decode_tile_kernel<EPL, 4>, grid, dim3(32 * kWarps), 0, s, p);
            return true;
        case 6:
            launch_pdl(decode_tile_kernel<EPL, 6>, grid, dim3(32 * kWarps), 0, s, p);
            return true;
        case 8:
            launch_pdl(decode_tile_kernel<EPL, 8>, grid, dim3(32 * kWarps), 0, s, p);
            return true;
        default: return false;
    }
}

template <class CT>
static void launch_decode_typed(DecodeParams p, cudaStream_t s) {
    const unsigned T = static_cast<unsigned>(p.n_tok);
    dim3 grid(static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.max_splits), T);
    const bool tile_ok = std::is_same_v<CT, __nv_bfloat16> && !tile_disabled() &&
                         ((reinterpret_cast<uintptr_t>(p.k_cache) | reinterpret_cast<uintptr_t>(p.v_cache)) & 15) == 0;
    const bool tc_ok = tile_ok && !tc_disabled() && p.q_dt == kBF16 && p.G <= kMaxG &&
                       (reinterpret_cast<uintptr_t>(p.q) & 15) == 0 && (p.D == 256 || p.D == 128);
    if (tc_ok) {
        // Splits of at least 64 rows (two 8-key tiles per warp): the walk is cheap enough that fewer blocks and
        // fewer partials for the merge win. H200, gated attention of the 27B, in-graph us against 32 rows
        // (docs/BENCHMARKS.md, session 19): length 512 12.46 -> 12.24, four tokens 22.0 -> 17.5, 4096 30.8 ->
        // 18.4, 32K the same (128 splits either way); 128 rows: 14.2 / 18.9 / 19.6. GRIMOIRE_DECODE_TC_MINKEYS=N
        // for the A/B.
        static const int min_keys = [] {
            const char* v = std::getenv("GRIMOIRE_DECODE_TC_MINKEYS");
            const int n = v ? std::atoi(v) : 0;
            return n >= 8 ? n : 64;
        }();
        p.min_keys = min_keys;
        // 8-key tiles (KT = 1): at 32 keys per split (lengths up to 4096) each of the 4 warps has one; 16-key
        // tiles were 6-12% slower at 32K (and spill at head_dim 256 with the next tile in flight).
        if (p.D == 256)
            launch_pdl(decode_tc_kernel<8, 1>, grid, dim3(32 * kWarps), 0, s, p);
        else
            launch_pdl(decode_tc_kernel<4, 1>, grid, dim3(32 * kWarps), 0, s, p);
    } else if (tile_ok && ((p.D == 256 && launch_tile<8>(p, grid, s)) || (p.D == 128 && launch_tile<4>(p, grid, s)))) {
    } else switch (p.D / 32) {
            case 1:
                launch_pdl(decode_split_kernel<CT, 1>, grid, dim3(32 * kWarps), 0, s, p);
                break;
            case 2:
                launch_pdl(decode_split_kernel<CT, 2>, grid, dim3(32 * kWarps), 0, s, p);
                break;
            case 4:
                launch_pdl(decode_split_kernel<CT, 4>, grid, dim3(32 * kWarps), 0, s, p);
                break;
            case 8:
                launch_pdl(decode_split_kernel<CT, 8>, grid, dim3(32 * kWarps), 0, s, p);
                break;
            default:
                throw Error("cuda attention: decode supports head_dim 32, 64, 128, 256");
    }
    check_launch("attention decode");
    launch_pdl(decode_combine_kernel, dim3(static_cast<unsigned>(p.Hq), 1, T), dim3(kCombineThreads), 0, s,
               p);
    check_launch("attention decode combine");
}

void launch_decode(const void* q,
                   int q_dt,
                   const void* k_cache,
                   const void* v_cache,
                   int kv_dt,
                   const Geometry& g,
                   int64_t n_past,
                   const int* n_past_dev,
                   float scale,
                   float* ws,
                   void* out,
                   int o_dt,
                   cudaStream_t s,
                   const void* gate,
                   int gate_dt,
                   int64_t gate_stride,
                   bool ahead) {
    if (g.T < 1 || g.T > kMaxDecodeTokens) throw Error("cuda attention: decode takes 1..8 tokens");
    DecodeParams p{q,
                   k_cache,
                   v_cache,
                   ws,
                   out,
                   q_dt,
                   o_dt,
                   static_cast<int>(g.Hq / g.Hkv),
                   g.Hq,
                   g.Hkv,
                   g.D,
                   n_past,
                   n_past_dev,
                   scale,
                   gate,
                   gate_dt,
                   gate_stride,
                   static_cast<int>(kMaxSplits / g.T),
                   static_cast<int>(g.T),
                   1,
                   0,
                   kMinKeysPerSplit,
                   ahead ? 1 : 0};
    // Gated attention: the prep kernel launched just before wrote this step's cache rows (fused_gated_attention.cu).
    p.prewait = gate != nullptr && prewait_enabled() ? 1 : 0;
    if (kv_dt == kBF16) launch_decode_typed<__nv_bfloat16>(p, s);
    else launch_decode_typed<float>(p, s);
}

}  // namespace grimoire::cuda::attn
