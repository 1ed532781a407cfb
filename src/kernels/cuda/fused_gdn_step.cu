// The Gated DeltaNet recurrence for short inputs (decode, verify steps) fused with what surrounds it in
// Backend::gdn_core: q, k and v are read in place from the conv output [T, q | k | v] (no copy_cols), and
// the gated RMSNorm of each value head, w * rmsnorm(o) * silu(z), is applied before o leaves the block.
//
// T >= 2 (gdn_step_tiled_kernel): block = one value head h, kRowGroups x kCols threads: thread (tx, ty) keeps
// state column j = tx for rows ty, ty + kRowGroups, ... (dk / kRowGroups of them, in registers) for the whole
// call, so the state is read and written once whatever T is. Tokens go in tiles of kTile: every input of the
// tile (q, k of key head h / (Hv / Hk), v, z) is loaded at once, one warp per token L2-normalises its q and k
// and computes decay, beta and k.q; then per token ONE reduction over the row groups gives both column sums
// S^T k and S^T q of the old state (o = S_new^T q = decay S^T q + u (k.q) with u = beta (v - decay S^T k)),
// double buffered by token parity so a token costs one barrier; last, one warp per token applies the gated
// norm. (The per-token kernel, kept for T = 1, has six barriers and a dependent global load per token: 18 us
// per 27B layer at T = 4 on the H200, the tiled one 13.3.) o is rounded to the output dtype before the norm,
// as the unfused sequence stored it.
//
// Hopper (gdn_step_split_kernel, any T): a value head's dv columns are independent in the recurrence but for
// the gated norm's sum of squares, so each head is split over a cluster of blocks of kSplitCols columns (four
// for dv = 128: 192 blocks for the 27B's 48 heads instead of 48 on 132 SMs, each reading a quarter of the
// head's 64 KB state); the blocks of a cluster exchange their per-token partial sums of squares through
// distributed shared memory and add them in rank order (deterministic).
#include <cooperative_groups.h>

#include <cstdlib>
#include <string>

#include "kernels/cuda/fused_util.cuh"
#include "kernels/cuda/gdn_recurrence.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

namespace {
constexpr int kRowGroups = 8;
constexpr int kCols = 128;  // max dv
constexpr int kMaxDk = 128;
constexpr int kRowsPerThread = kMaxDk / kRowGroups;
constexpr int kTile = 8;  // tokens per tile (<= the block's warps)

struct StepArgs {
    const void* conv;  // [T, C] q | k | v after conv + SiLU
    const void* a;     // [T, Hv]
    const void* b;     // [T, Hv]
    const void* A_log;    // [Hv]
    const void* dt_bias;  // [Hv]
    const void* z;        // [T, Hv * dv]
    const void* w;        // [dv]
    float* state;         // [Hv, dk, dv]
    void* out;            // [T, Hv * dv]
    const void* x;        // null, or [T, H] BF16: a, b = x ba^T computed in the kernel (gdn_step_fused_ba)
    const void* ba;       // [2 Hv, H] BF16: b's rows, then a's
    int cdt, adt, bdt, Adt, ddt, zdt, wdt, odt;
    int64_t T, C, Hk, Hv, dk, dv, H;
    float eps;
    int prewait;  // split kernel: z, the norm weight and (one token) b | a in one round before the wait
    int zlate;    // z was written by this kernel's predecessor (gdn_step_fused_ba z_prior false): after the wait
    L2Prefetch pf;  // the next projection's weights, asked of L2 after the wait (l2_prefetch.h)
    int ahead;      // split kernel: its dependent (out_proj) may launch before its wait (pdl_enter_ahead)
};
}  // namespace

// One token (T = 1) where the split kernel is not used: the per-token form, every phase spread over the whole
// block (block-wide sums). The tiled kernel below was faster from two tokens on but 1.7 us slower for one on the
// H200 (9.2 against 7.5 us per 27B layer) when its single-warp phases waited on a and b, loaded there (they are
// loaded with the tile now; not re-measured).
static __global__ void __launch_bounds__(kRowGroups * kCols) gdn_step1_kernel(StepArgs p) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    l2_prefetch_share(p.pf, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
    __shared__ float qn[kMaxDk], kn[kMaxDk];
    __shared__ float part[kRowGroups][kCols];
    __shared__ float red[32];
    const int tx = threadIdx.x % kCols, ty = threadIdx.x / kCols, tid = threadIdx.x;
    const int64_t h = blockIdx.x, kh = h / (p.Hv / p.Hk), key = p.Hk * p.dk;
    const int64_t j = tx;
    const bool col_ok = j < p.dv;
    const int nr = static_cast<int>((p.dk - ty + kRowGroups - 1) / kRowGroups);
    float* S = p.state + h * p.dk * p.dv;

    float s[kRowsPerThread];
    gdn::load_state<kRowGroups>(s, S, nr, ty, j, p.dv, col_ok);

    const float A = expf(ld(p.A_log, p.Adt, h));
    const float dtb = ld(p.dt_bias, p.ddt, h);
    const float qscale = rsqrtf(static_cast<float>(p.dk));
    const float wj = col_ok ? ld(p.w, p.wdt, j) : 0.0f;
    for (int64_t t = 0; t < p.T; ++t) {
        const int64_t row = t * p.C;
        const float qv = tid < p.dk ? ld(p.conv, p.cdt, row + kh * p.dk + tid) : 0.0f;
        const float kv = tid < p.dk ? ld(p.conv, p.cdt, row + key + kh * p.dk + tid) : 0.0f;
        const float vj = col_ok ? ld(p.conv, p.cdt, row + 2 * key + h * p.dv + j) : 0.0f;
        const float av = ld(p.a, p.adt, t * p.Hv + h), bv = ld(p.b, p.bdt, t * p.Hv + h);
        const float zj = col_ok ? ld(p.z, p.zdt, (t * p.Hv + h) * p.dv + j) : 0.0f;
        gdn::normalise_qk(qv, kv, tid, p.dk, qscale, qn, kn, red);
        const float decay = expf(-A * gdn::softplus_(av + dtb));
        const float beta = 1.0f / (1.0f + expf(-bv));
        float oj = gdn::token_step(s, nr, tx, ty, qn, kn, decay, beta, vj, part);
        oj = round_as(p.odt, oj);
        // Gated RMSNorm over the head's dv outputs (row group 0 holds one copy of each column).
        const float ss = block_sum(ty == 0 && col_ok ? oj * oj : 0.0f, red);
        const float r = rsqrtf(ss / static_cast<float>(p.dv) + p.eps);
        if (ty == 0 && col_ok)
            st(p.out, p.odt, (t * p.Hv + h) * p.dv + j, wj * oj * r * zj * sigmoidf_(zj));
        __syncthreads();  // part[], qn, kn are rewritten by the next token
    }
    gdn::store_state<kRowGroups>(s, S, nr, ty, j, p.dv, col_ok);
}

// The token-tile machinery of the tiled kernels (one block per head, and the split one of NC state columns):
// shared memory for a tile of up to kTile tokens, its loads, the per-token scalars and the state update.
template <int NC>
struct TileSmem {
    float qs[kTile][kMaxDk], ks[kTile][kMaxDk];  // raw, then normalised in place
    float vs[kTile][NC], zs[kTile][NC], os[kTile][NC];
    float av[kTile], bv[kTile], decay[kTile], beta[kTile], kq[kTile];
    float part[2][2][kRowGroups][NC];  // [token parity][S^T k, S^T q][row group][column]
};

// Every input of tokens t0 .. t0 + nt - 1 at once (one memory latency for the tile, not one per token): q, k of
// key head kh, v and z of value head h's columns c0 .. c0 + NC - 1, a and b.
template <int NC>
__device__ __forceinline__ void load_tile(const StepArgs& p, TileSmem<NC>& m, int64_t t0, int nt, int64_t h,
                                          int64_t kh, int64_t c0, const float* ab = nullptr, bool z_done = false) {
    const int tid = static_cast<int>(threadIdx.x);
    const int64_t key = p.Hk * p.dk;
    for (int i = tid; i < nt * 2 * kMaxDk; i += blockDim.x) {
        const int t = i / (2 * kMaxDk), r = i % (2 * kMaxDk), e = r % kMaxDk;
        const bool is_k = r >= kMaxDk;
        const int64_t row = (t0 + t) * p.C;
        const float x = e < p.dk ? ld(p.conv, p.cdt, row + (is_k ? key : 0) + kh * p.dk + e) : 0.0f;
        (is_k ? m.ks : m.qs)[t][e] = x;
    }
    for (int i = tid; i < nt * NC; i += blockDim.x) {
        const int t = i / NC, c = i % NC;
        const bool ok = c0 + c < p.dv;
        m.vs[t][c] = ok ? ld(p.conv, p.cdt, (t0 + t) * p.C + 2 * key + h * p.dv + c0 + c) : 0.0f;
        if (!z_done) m.zs[t][c] = ok ? ld(p.z, p.zdt, ((t0 + t) * p.Hv + h) * p.dv + c0 + c) : 0.0f;
    }
    if (tid < nt) {
        if (ab) {  // computed by this same thread (gdn_step_split_kernel): no barrier needed
            m.av[tid] = ab[kTile + t0 + tid];
            m.bv[tid] = ab[t0 + tid];
        } else {
            m.av[tid] = ld(p.a, p.adt, (t0 + tid) * p.Hv + h);
            m.bv[tid] = ld(p.b, p.bdt, (t0 + tid) * p.Hv + h);
        }
    }
}

// gdn_step_fused_ba: b, a of value head h for the T <= kTile tokens, x [T, H] @ rows h and Hv + h of ba^T,
// summed over the block's warps in warp order and rounded to BF16 as the GEMV would store them; thread t < T
// leaves token t's pair in ab[t] (b) and ab[kTile + t] (a). Reads only x (the norm's output, written before
// the projections: three kernels back) and weights, so it runs before the programmatic-launch wait, under the
// predecessors' tails. NW: the block's warps.
template <int NW>
__device__ __forceinline__ void ba_project(const StepArgs& p, int64_t h, float* ab /* [2 kTile] shared */,
                                           float (*part)[kTile][NW] /* [2][kTile][NW] shared */) {
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const __nv_bfloat16* wb = static_cast<const __nv_bfloat16*>(p.ba) + h * p.H;
    const __nv_bfloat16* wa = static_cast<const __nv_bfloat16*>(p.ba) + (p.Hv + h) * p.H;
    const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(p.x);
    float sb[kTile], sa[kTile];
#pragma unroll
    for (int t = 0; t < kTile; ++t) sb[t] = sa[t] = 0.0f;
    auto dot8 = [](const uint4& w, const uint4& v, float acc) {
        const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
        const __nv_bfloat162* v2 = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 wf = __bfloat1622float2(w2[e]), vf = __bfloat1622float2(v2[e]);
            acc = fmaf(vf.x, wf.x, acc);
            acc = fmaf(vf.y, wf.y, acc);
        }
        return acc;
    };
    constexpr int64_t step = static_cast<int64_t>(NW) * 32 * 8;
    const int64_t i0 = static_cast<int64_t>(tid) * 8;
    int64_t rest = i0;  // the first piece the general loop below takes
    if (p.T == 1 && p.prewait) {
        // One token (the decode step, the only T the backend folds b | a for): the thread's first kBaPieces
        // pieces of 8 channels (all of them for H <= kBaPieces * NW * 256: the 27B's 5120 in three) are loaded
        // before any is used, one memory latency instead of a dependent load-and-FMA chain per piece, which sat
        // on the step's critical path before the wait (ncu, session 15: 10.5 us for the kernel, 5.8 without
        // b | a). Same summation order as the loop.
        constexpr int kBaPieces = 3;
        uint4 rb[kBaPieces], ra[kBaPieces], rx[kBaPieces];
#pragma unroll
        for (int u = 0; u < kBaPieces; ++u) {
            const int64_t i = i0 + u * step;
            const bool ok = i < p.H;
            rb[u] = ok ? __ldg(reinterpret_cast<const uint4*>(wb + i)) : make_uint4(0, 0, 0, 0);
            ra[u] = ok ? __ldg(reinterpret_cast<const uint4*>(wa + i)) : make_uint4(0, 0, 0, 0);
            rx[u] = ok ? *reinterpret_cast<const uint4*>(x + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kBaPieces; ++u) {
            sb[0] = dot8(rb[u], rx[u], sb[0]);
            sa[0] = dot8(ra[u], rx[u], sa[0]);
        }
        rest = i0 + kBaPieces * step;
    }
    for (int64_t i = rest; i < p.H; i += step) {
        const uint4 bw = __ldg(reinterpret_cast<const uint4*>(wb + i)), aw = __ldg(reinterpret_cast<const uint4*>(wa + i));
#pragma unroll
        for (int t = 0; t < kTile; ++t) {
            if (t < p.T) {
                const uint4 xv = *reinterpret_cast<const uint4*>(x + t * p.H + i);
                sb[t] = dot8(bw, xv, sb[t]);
                sa[t] = dot8(aw, xv, sa[t]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
        if (t < p.T) {
            const float b = warp_sum(sb[t]), a = warp_sum(sa[t]);
            if (lane == 0) part[0][t][warp] = b, part[1][t][warp] = a;
        }
    }
    __syncthreads();
    if (tid < p.T) {
        float b = 0.0f, a = 0.0f;
        for (int w = 0; w < NW; ++w) b += part[0][tid][w], a += part[1][tid][w];
        ab[tid] = round_as(kBF16, b);
        ab[kTile + tid] = round_as(kBF16, a);
    }
}

// Warp t < nt: token t's q, k L2-normalised in place (q also scaled by dk^-0.5), k.q, decay and beta.
template <int NC>
__device__ __forceinline__ void token_scalars(TileSmem<NC>& m, int t, int lane, int64_t dk, float A, float dtb) {
    const float qscale = rsqrtf(static_cast<float>(dk));
    float qss = 0.0f, kss = 0.0f;
    for (int e = lane; e < dk; e += 32) {
        qss += m.qs[t][e] * m.qs[t][e];
        kss += m.ks[t][e] * m.ks[t][e];
    }
    const float qr = rsqrtf(warp_sum(qss) + 1e-6f) * qscale, kr = rsqrtf(warp_sum(kss) + 1e-6f);
    float kq = 0.0f;
    for (int e = lane; e < dk; e += 32) {
        const float qn = m.qs[t][e] * qr, kn = m.ks[t][e] * kr;
        m.qs[t][e] = qn;
        m.ks[t][e] = kn;
        kq += qn * kn;
    }
    kq = warp_sum(kq);
    if (lane == 0) {
        m.kq[t] = kq;
        m.decay[t] = expf(-A * gdn::softplus_(m.av[t] + dtb));
        m.beta[t] = 1.0f / (1.0f + expf(-m.bv[t]));
    }
}

// The tile's tokens through the thread's state slice s (column tx of the block, rows ty + m * kRowGroups): per
// token ONE reduction over the row groups gives both column sums S^T k and S^T q of the old state (o = S_new^T
// q = decay S^T q + u (k.q) with u = beta (v - decay S^T k)), double buffered by token parity so a token costs
// one barrier; o (rounded to the output dtype) into os.
template <int NC>
__device__ __forceinline__ void tile_tokens(float (&s)[kRowsPerThread], int nr, int tx, int ty, int nt,
                                            TileSmem<NC>& m, int odt, bool col_ok) {
    for (int t = 0; t < nt; ++t) {
        const int par = t & 1;  // part[par] was last read two tokens ago, before the previous barrier
        float sk = 0.0f, sq = 0.0f;
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
            if (r < nr) {
                sk += s[r] * m.ks[t][ty + r * kRowGroups];
                sq += s[r] * m.qs[t][ty + r * kRowGroups];
            }
        }
        m.part[par][0][ty][tx] = sk;
        m.part[par][1][ty][tx] = sq;
        __syncthreads();
        float SK = 0.0f, SQ = 0.0f;
#pragma unroll
        for (int g = 0; g < kRowGroups; ++g) {
            SK += m.part[par][0][g][tx];
            SQ += m.part[par][1][g][tx];
        }
        const float decay = m.decay[t];
        const float u = m.beta[t] * (m.vs[t][tx] - decay * SK);
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r)
            if (r < nr) s[r] = s[r] * decay + m.ks[t][ty + r * kRowGroups] * u;
        if (ty == 0) m.os[t][tx] = col_ok ? round_as(odt, decay * SQ + u * m.kq[t]) : 0.0f;
    }
}

static __global__ void __launch_bounds__(kRowGroups * kCols) gdn_step_tiled_kernel(StepArgs p) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    l2_prefetch_share(p.pf, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
    __shared__ TileSmem<kCols> m;
    const int tx = threadIdx.x % kCols, ty = threadIdx.x / kCols, tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int64_t h = blockIdx.x, kh = h / (p.Hv / p.Hk), dk = p.dk, dv = p.dv;
    const int64_t j = tx;
    const bool col_ok = j < dv;
    const int nr = static_cast<int>((dk - ty + kRowGroups - 1) / kRowGroups);
    float* S = p.state + h * dk * dv;

    float s[kRowsPerThread];
    gdn::load_state<kRowGroups>(s, S, nr, ty, j, dv, col_ok);

    const float A = expf(ld(p.A_log, p.Adt, h));
    const float dtb = ld(p.dt_bias, p.ddt, h);
    for (int64_t t0 = 0; t0 < p.T; t0 += kTile) {
        const int nt = static_cast<int>(p.T - t0 < kTile ? p.T - t0 : kTile);
        load_tile(p, m, t0, nt, h, kh, 0);
        __syncthreads();
        if (warp < nt) token_scalars(m, warp, lane, dk, A, dtb);
        __syncthreads();
        tile_tokens(s, nr, tx, ty, nt, m, p.odt, col_ok);
        __syncthreads();
        if (warp < nt) {  // warp t: the gated RMSNorm of token t over the head's dv outputs
            const int t = warp;
            float ss = 0.0f;
            for (int c = lane; c < dv; c += 32) ss += m.os[t][c] * m.os[t][c];
            const float r = rsqrtf(warp_sum(ss) / static_cast<float>(dv) + p.eps);
            for (int c = lane; c < dv; c += 32) {
                const float zc = m.zs[t][c];
                st(p.out, p.odt, ((t0 + t) * p.Hv + h) * dv + c, ld(p.w, p.wdt, c) * m.os[t][c] * r * zc * sigmoidf_(zc));
            }
        }
        __syncthreads();  // the next tile rewrites the tile buffers
    }
    gdn::store_state<kRowGroups>(s, S, nr, ty, j, dv, col_ok);
}

constexpr int kSplitCols = 32;  // state columns per block of the split kernel (one warp's width)
constexpr int kMaxSplit = 4;    // blocks per head: dv <= kSplitCols * kMaxSplit

static __global__ void __launch_bounds__(kRowGroups * kSplitCols) gdn_step_split_kernel(StepArgs p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    __shared__ TileSmem<kSplitCols> m;
    __shared__ float ss_s[kTile];  // this block's sum of o^2 per token
    const int nsplit = static_cast<int>(cluster.num_blocks());
    const int rank = static_cast<int>(cluster.block_rank());
    const int tx = threadIdx.x % kSplitCols, ty = threadIdx.x / kSplitCols, tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int64_t h = blockIdx.x / nsplit, kh = h / (p.Hv / p.Hk), dk = p.dk, dv = p.dv;
    const int64_t c0 = static_cast<int64_t>(rank) * kSplitCols, j = c0 + tx;  // this thread's state column
    const bool col_ok = j < dv;
    const int nr = static_cast<int>((dk - ty + kRowGroups - 1) / kRowGroups);
    float* S = p.state + h * dk * dv;

    // The state and the decay parameters before the programmatic-launch wait: no kernel of this step wrote
    // them (the state's last writer is this layer's step one forward earlier), and the chain of waits
    // (common.cuh pdl_enter) has every kernel before the predecessor complete when this one starts. The 16 KB
    // per block then loads under the conv kernel's tail instead of after it.
    float s[kRowsPerThread];
    gdn::load_state<kRowGroups>(s, S, nr, ty, j, dv, col_ok);
    const float A = expf(ld(p.A_log, p.Adt, h));
    const float dtb = ld(p.dt_bias, p.ddt, h);
    __shared__ float ab_s[2 * kTile];
    constexpr int kWarps = kRowGroups * kSplitCols / 32;
    __shared__ float ab_part[2][kTile][kWarps];
    if (p.x) ba_project<kWarps>(p, h, ab_s, ab_part);
    // z of the first tile and the norm weight of the lane's column before the wait too: z is the in_proj
    // output, which completed before the conv kernel (this kernel's predecessor) passed its own wait. Not when
    // the in_proj kernel did the conv itself and so is the predecessor (zlate).
    if (p.prewait && !p.zlate) {
        const int nt0 = static_cast<int>(p.T < kTile ? p.T : kTile);
        for (int i = tid; i < nt0 * kSplitCols; i += blockDim.x) {
            const int t = i / kSplitCols, c = i % kSplitCols;
            m.zs[t][c] = c0 + c < dv ? ld(p.z, p.zdt, (t * p.Hv + h) * dv + c0 + c) : 0.0f;
        }
    }
    float wcol = p.prewait && c0 + lane < dv ? ld(p.w, p.wdt, c0 + lane) : 0.0f;
    pdl_enter_ahead(p.ahead);  // launched through launch_gdn_split (programmatic + cluster attributes)
    l2_prefetch_share(p.pf, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
    if (!p.prewait && c0 + lane < dv) wcol = ld(p.w, p.wdt, c0 + lane);
    for (int64_t t0 = 0; t0 < p.T; t0 += kTile) {
        const int nt = static_cast<int>(p.T - t0 < kTile ? p.T - t0 : kTile);
        const bool last_tile = t0 + kTile >= p.T;
        // q, k: every block of the cluster reads them
        load_tile(p, m, t0, nt, h, kh, c0, p.x ? ab_s : nullptr, t0 == 0 && p.prewait && !p.zlate);
        __syncthreads();
        if (warp < nt) token_scalars(m, warp, lane, dk, A, dtb);
        __syncthreads();
        tile_tokens(s, nr, tx, ty, nt, m, p.odt, col_ok);
        __syncthreads();
        if (warp < nt) {  // warp t (lane = column): this block's part of token t's sum of squares
            const float o = m.os[warp][lane];
            const float ss = warp_sum(o * o);
            if (lane == 0) ss_s[warp] = ss;
        }
        cluster.sync();   // every block's ss_s is written
        if (warp < nt) {  // the head's sum in rank order, then the gated RMSNorm of this block's columns
            const int t = warp;
            float part_ss[kMaxSplit];  // the remote reads issued together, then added in rank order
#pragma unroll
            for (int r = 0; r < kMaxSplit; ++r) part_ss[r] = r < nsplit ? cluster.map_shared_rank(ss_s, r)[t] : 0.0f;
            float ss = 0.0f;
#pragma unroll
            for (int r = 0; r < kMaxSplit; ++r)
                if (r < nsplit) ss += part_ss[r];
            const float rn = rsqrtf(ss / static_cast<float>(dv) + p.eps);
            const int64_t col = c0 + lane;
            if (col < dv) {
                const float zc = m.zs[t][lane];
                st(p.out, p.odt, ((t0 + t) * p.Hv + h) * dv + col, wcol * m.os[t][lane] * rn * zc * sigmoidf_(zc));
            }
        }
        if (!last_tile || !p.prewait) {
            cluster.sync();  // the other blocks have read ss_s; the next tile rewrites the tile buffers
        } else {
            // No block may exit while another still reads its ss_s: arrive now, store the state, then wait.
            // Relaxed: this barrier orders nothing but those remote reads, which completed before the arrive
            // (their values were used), so the arrive need not first wait for this block's output stores
            // (ncu, session 34: the release form's fence held ~4% of the kernel's stall samples).
            asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
        }
    }
    gdn::store_state<kRowGroups>(s, S, nr, ty, j, dv, col_ok);
    if (p.prewait) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

// The split kernel on Hopper for dv up to kSplitCols * kMaxSplit (GRIMOIRE_GDN_SPLIT=0: the one-block-per-head
// kernels), as a cluster launch that may also start early (programmatic stream serialization).
static bool gdn_split_enabled(int64_t dv) {
    static const bool on = [] {
        const char* e = std::getenv("GRIMOIRE_GDN_SPLIT");
        return device_is_hopper() && !(e && std::string(e) == "0");
    }();
    return on && dv <= kSplitCols * kMaxSplit;
}

// GRIMOIRE_GDN_PREWAIT=0: the split kernel's loads as before session 15 (z and the norm weight after the wait,
// b | a piece by piece, a full cluster barrier before the state store), for the A/B.
static bool gdn_prewait() {
    static const bool on = [] {
        const char* e = std::getenv("GRIMOIRE_GDN_PREWAIT");
        return !(e && e[0] == '0');
    }();
    return on;
}

static void launch_gdn_split(StepArgs p, cudaStream_t s) {
    p.prewait = gdn_prewait() ? 1 : 0;
    const int nsplit = static_cast<int>((p.dv + kSplitCols - 1) / kSplitCols);
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(nsplit);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(p.Hv * nsplit));
    cfg.blockDim = dim3(kRowGroups * kSplitCols);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_enabled() ? 2 : 1;
    cudaLaunchKernelEx(&cfg, gdn_step_split_kernel, p);
}

namespace {
// The arguments both entry points share (everything but where a and b come from), checked.
StepArgs step_args(const Tensor& conv, const Tensor& A_log, const Tensor& dt_bias, Tensor& state, const Tensor& z,
                   const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out) {
    const char* op = "gdn_core";
    if (state.ndim != 3 || state.dtype != DType::F32) throw Error("cuda gdn_core: state must be [Hv, dk, dv] F32");
    StepArgs p{};
    p.T = conv.rows();
    p.C = conv.cols();
    p.Hk = n_k_heads;
    p.Hv = state.dim(0);
    p.dk = state.dim(1);
    p.dv = state.dim(2);
    if (p.Hk <= 0 || p.Hv % p.Hk != 0 || p.C != 2 * p.Hk * p.dk + p.Hv * p.dv)
        throw Error("cuda gdn_core: conv must be [T, 2 Hk dk + Hv dv] with Hv a multiple of Hk");
    if (p.dk > kMaxDk || p.dv > kCols) throw Error("cuda gdn_core: dk and dv must be <= 128");
    if (A_log.numel() != p.Hv || dt_bias.numel() != p.Hv || z.numel() != p.T * p.Hv * p.dv ||
        norm_w.numel() != p.dv || out.numel() != p.T * p.Hv * p.dv)
        throw Error("cuda gdn_core: A_log, dt_bias [Hv], z, out [T, Hv * dv], norm [dv]");
    p.conv = conv.data; p.cdt = dt_code(conv.dtype, op, "conv");
    p.A_log = A_log.data; p.Adt = dt_code(A_log.dtype, op, "A_log");
    p.dt_bias = dt_bias.data; p.ddt = dt_code(dt_bias.dtype, op, "dt_bias");
    p.z = z.data; p.zdt = dt_code(z.dtype, op, "z");
    p.w = norm_w.data; p.wdt = dt_code(norm_w.dtype, op, "norm_w");
    p.state = state.ptr<float>();
    p.out = out.data; p.odt = dt_code(out.dtype, op, "out");
    p.eps = eps;
    return p;
}
}  // namespace

void gdn_step_fused(const Tensor& conv, const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                    Tensor& state, const Tensor& z, const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out,
                    cudaStream_t s, bool z_prior, const L2Prefetch* pf) {
    const char* op = "gdn_core";
    StepArgs p = step_args(conv, A_log, dt_bias, state, z, norm_w, eps, n_k_heads, out);
    p.zlate = z_prior ? 0 : 1;  // only the split kernel reads z before its wait
    if (pf) p.pf = *pf;
    if (a.numel() != p.T * p.Hv || b.numel() != p.T * p.Hv) throw Error("cuda gdn_core: a, b must be [T, Hv]");
    if (p.T == 0) return;
    p.a = a.data; p.adt = dt_code(a.dtype, op, "a");
    p.b = b.data; p.bdt = dt_code(b.dtype, op, "b");
    if (gdn_split_enabled(p.dv))
        launch_gdn_split(p, s);
    else if (p.T == 1)
        launch_pdl(gdn_step1_kernel, dim3(static_cast<unsigned>(p.Hv)), dim3(kRowGroups * kCols), 0, s, p);
    else
        launch_pdl(gdn_step_tiled_kernel, dim3(static_cast<unsigned>(p.Hv)), dim3(kRowGroups * kCols), 0, s,
                   p);
    check_launch("gdn_core step");
}

bool gdn_step_ba_ok(int64_t T, int64_t dv, const Tensor& ba_w) {
    return T >= 1 && T <= kTile && gdn_split_enabled(dv) && ba_w.dtype == DType::BF16 && ba_w.ndim == 2 &&
           ba_w.dim(1) % 8 == 0 && (reinterpret_cast<uintptr_t>(ba_w.data) & 15) == 0;
}

void gdn_step_fused_ba(const Tensor& conv,
                       const Tensor& x,
                       const Tensor& ba_w,
                       const Tensor& A_log,
                       const Tensor& dt_bias,
                       Tensor& state,
                       const Tensor& z,
                       bool z_prior,
                       const Tensor& norm_w,
                       float eps,
                       int64_t n_k_heads,
                       Tensor& out,
                       cudaStream_t s,
                       const L2Prefetch* pf,
                       bool ahead) {
    StepArgs p = step_args(conv, A_log, dt_bias, state, z, norm_w, eps, n_k_heads, out);
    p.zlate = z_prior ? 0 : 1;
    if (pf) p.pf = *pf;
    if (!gdn_step_ba_ok(p.T, p.dv, ba_w) || x.dtype != DType::BF16 || x.rows() != p.T || x.cols() != ba_w.dim(1) ||
        ba_w.dim(0) != 2 * p.Hv || (reinterpret_cast<uintptr_t>(x.data) & 15) != 0)
        throw Error("cuda gdn_core_ba: x [T, H] and ba [2 Hv, H] BF16 (16-byte aligned, H a multiple of 8) for "
                    "1..8 tokens on Hopper");
    p.x = x.data;
    p.ba = ba_w.data;
    p.ahead = ahead ? 1 : 0;
    p.H = x.cols();
    launch_gdn_split(p, s);
    check_launch("gdn_core step (b | a folded in)");
}

}  // namespace grimoire::cuda
