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
    int cdt, adt, bdt, Adt, ddt, zdt, wdt, odt;
    int64_t T, C, Hk, Hv, dk, dv;
    float eps;
};
}  // namespace

// One token (T = 1): the per-token form, every phase spread over the whole block (block-wide sums). The tiled
// kernel below is faster from two tokens on but 1.7 us slower for one on the H200 (9.2 against 7.5 us per 27B
// layer): its single-warp phases wait on a and b and the norm weight, loaded there rather than up front.
static __global__ void __launch_bounds__(kRowGroups * kCols) gdn_step1_kernel(StepArgs p) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
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

static __global__ void __launch_bounds__(kRowGroups * kCols) gdn_step_tiled_kernel(StepArgs p) {
    pdl_enter();                                            // launched through launch_pdl (common.cuh)
    __shared__ float qs[kTile][kMaxDk], ks[kTile][kMaxDk];  // raw, then normalised in place
    __shared__ float vs[kTile][kCols], zs[kTile][kCols], os[kTile][kCols];
    __shared__ float decay_s[kTile], beta_s[kTile], kq_s[kTile];
    __shared__ float part[2][2][kRowGroups][kCols];  // [token parity][S^T k, S^T q][row group][column]
    const int tx = threadIdx.x % kCols, ty = threadIdx.x / kCols, tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int64_t h = blockIdx.x, kh = h / (p.Hv / p.Hk), key = p.Hk * p.dk, dk = p.dk, dv = p.dv;
    const int64_t j = tx;
    const bool col_ok = j < dv;
    const int nr = static_cast<int>((dk - ty + kRowGroups - 1) / kRowGroups);
    float* S = p.state + h * dk * dv;

    float s[kRowsPerThread];
    gdn::load_state<kRowGroups>(s, S, nr, ty, j, dv, col_ok);

    const float A = expf(ld(p.A_log, p.Adt, h));
    const float dtb = ld(p.dt_bias, p.ddt, h);
    const float qscale = rsqrtf(static_cast<float>(dk));
    for (int64_t t0 = 0; t0 < p.T; t0 += kTile) {
        const int nt = static_cast<int>(p.T - t0 < kTile ? p.T - t0 : kTile);
        // Every input of the tile at once (one memory latency for the tile, not one per token).
        for (int i = tid; i < nt * 2 * kMaxDk; i += blockDim.x) {
            const int t = i / (2 * kMaxDk), r = i % (2 * kMaxDk), e = r % kMaxDk;
            const bool is_k = r >= kMaxDk;
            const int64_t row = (t0 + t) * p.C;
            const float x = e < dk ? ld(p.conv, p.cdt, row + (is_k ? key : 0) + kh * dk + e) : 0.0f;
            (is_k ? ks : qs)[t][e] = x;
        }
        for (int i = tid; i < nt * kCols; i += blockDim.x) {
            const int t = i / kCols, c = i % kCols;
            const bool ok = c < dv;
            vs[t][c] = ok ? ld(p.conv, p.cdt, (t0 + t) * p.C + 2 * key + h * dv + c) : 0.0f;
            zs[t][c] = ok ? ld(p.z, p.zdt, ((t0 + t) * p.Hv + h) * dv + c) : 0.0f;
        }
        __syncthreads();
        if (warp < nt) {  // warp t: token t's q, k norms, k.q, decay and beta
            const int t = warp;
            float qss = 0.0f, kss = 0.0f;
            for (int e = lane; e < dk; e += 32) {
                qss += qs[t][e] * qs[t][e];
                kss += ks[t][e] * ks[t][e];
            }
            const float qr = rsqrtf(warp_sum(qss) + 1e-6f) * qscale, kr = rsqrtf(warp_sum(kss) + 1e-6f);
            float kq = 0.0f;
            for (int e = lane; e < dk; e += 32) {
                const float qn = qs[t][e] * qr, kn = ks[t][e] * kr;
                qs[t][e] = qn;
                ks[t][e] = kn;
                kq += qn * kn;
            }
            kq = warp_sum(kq);
            if (lane == 0) {
                const float av = ld(p.a, p.adt, (t0 + t) * p.Hv + h), bv = ld(p.b, p.bdt, (t0 + t) * p.Hv + h);
                kq_s[t] = kq;
                decay_s[t] = expf(-A * gdn::softplus_(av + dtb));
                beta_s[t] = 1.0f / (1.0f + expf(-bv));
            }
        }
        __syncthreads();
        for (int t = 0; t < nt; ++t) {
            const int par = t & 1;  // part[par] was last read two tokens ago, before the previous barrier
            float sk = 0.0f, sq = 0.0f;
#pragma unroll
            for (int m = 0; m < kRowsPerThread; ++m) {
                if (m < nr) {
                    sk += s[m] * ks[t][ty + m * kRowGroups];
                    sq += s[m] * qs[t][ty + m * kRowGroups];
                }
            }
            part[par][0][ty][tx] = sk;
            part[par][1][ty][tx] = sq;
            __syncthreads();
            float SK = 0.0f, SQ = 0.0f;
#pragma unroll
            for (int g = 0; g < kRowGroups; ++g) {
                SK += part[par][0][g][tx];
                SQ += part[par][1][g][tx];
            }
            const float decay = decay_s[t];
            const float u = beta_s[t] * (vs[t][tx] - decay * SK);
#pragma unroll
            for (int m = 0; m < kRowsPerThread; ++m)
                if (m < nr) s[m] = s[m] * decay + ks[t][ty + m * kRowGroups] * u;
            if (ty == 0) os[t][tx] = round_as(p.odt, decay * SQ + u * kq_s[t]);
        }
        __syncthreads();
        if (warp < nt) {  // warp t: the gated RMSNorm of token t over the head's dv outputs
            const int t = warp;
            float ss = 0.0f;
            for (int c = lane; c < dv; c += 32) ss += os[t][c] * os[t][c];
            const float r = rsqrtf(warp_sum(ss) / static_cast<float>(dv) + p.eps);
            for (int c = lane; c < dv; c += 32) {
                const float zc = zs[t][c];
                st(p.out, p.odt, ((t0 + t) * p.Hv + h) * dv + c, ld(p.w, p.wdt, c) * os[t][c] * r * zc * sigmoidf_(zc));
            }
        }
        __syncthreads();  // the next tile rewrites qs, ks, vs, zs, os
    }
    gdn::store_state<kRowGroups>(s, S, nr, ty, j, dv, col_ok);
}

constexpr int kSplitCols = 32;  // state columns per block of the split kernel (one warp's width)
constexpr int kMaxSplit = 4;    // blocks per head: dv <= kSplitCols * kMaxSplit

static __global__ void __launch_bounds__(kRowGroups * kSplitCols) gdn_step_split_kernel(StepArgs p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    pdl_enter();  // launched through launch_gdn_split (programmatic + cluster attributes)
    __shared__ float qs[kTile][kMaxDk], ks[kTile][kMaxDk];  // raw, then normalised in place
    __shared__ float vs[kTile][kSplitCols], zs[kTile][kSplitCols], os[kTile][kSplitCols];
    __shared__ float av_s[kTile], bv_s[kTile], decay_s[kTile], beta_s[kTile], kq_s[kTile];
    __shared__ float ss_s[kTile];                              // this block's sum of o^2 per token
    __shared__ float part[2][2][kRowGroups][kSplitCols];       // [token parity][S^T k, S^T q][row group][column]
    const int nsplit = static_cast<int>(cluster.num_blocks());
    const int rank = static_cast<int>(cluster.block_rank());
    const int tx = threadIdx.x % kSplitCols, ty = threadIdx.x / kSplitCols, tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int64_t h = blockIdx.x / nsplit, kh = h / (p.Hv / p.Hk), key = p.Hk * p.dk, dk = p.dk, dv = p.dv;
    const int64_t j = static_cast<int64_t>(rank) * kSplitCols + tx;  // this thread's state column
    const bool col_ok = j < dv;
    const int nr = static_cast<int>((dk - ty + kRowGroups - 1) / kRowGroups);
    float* S = p.state + h * dk * dv;

    float s[kRowsPerThread];
    gdn::load_state<kRowGroups>(s, S, nr, ty, j, dv, col_ok);

    const float A = expf(ld(p.A_log, p.Adt, h));
    const float dtb = ld(p.dt_bias, p.ddt, h);
    const float qscale = rsqrtf(static_cast<float>(dk));
    for (int64_t t0 = 0; t0 < p.T; t0 += kTile) {
        const int nt = static_cast<int>(p.T - t0 < kTile ? p.T - t0 : kTile);
        // Every input of the tile at once: q, k of the key head (each block of the cluster reads them), v and
        // z of this block's columns, a and b.
        for (int i = tid; i < nt * 2 * kMaxDk; i += blockDim.x) {
            const int t = i / (2 * kMaxDk), r = i % (2 * kMaxDk), e = r % kMaxDk;
            const bool is_k = r >= kMaxDk;
            const int64_t row = (t0 + t) * p.C;
            const float x = e < dk ? ld(p.conv, p.cdt, row + (is_k ? key : 0) + kh * dk + e) : 0.0f;
            (is_k ? ks : qs)[t][e] = x;
        }
        for (int i = tid; i < nt * kSplitCols; i += blockDim.x) {
            const int t = i / kSplitCols, c = i % kSplitCols;
            const int64_t col = static_cast<int64_t>(rank) * kSplitCols + c;
            const bool ok = col < dv;
            vs[t][c] = ok ? ld(p.conv, p.cdt, (t0 + t) * p.C + 2 * key + h * dv + col) : 0.0f;
            zs[t][c] = ok ? ld(p.z, p.zdt, ((t0 + t) * p.Hv + h) * dv + col) : 0.0f;
        }
        if (tid < nt) {
            av_s[tid] = ld(p.a, p.adt, (t0 + tid) * p.Hv + h);
            bv_s[tid] = ld(p.b, p.bdt, (t0 + tid) * p.Hv + h);
        }
        __syncthreads();
        if (warp < nt) {  // warp t: token t's q, k norms, k.q, decay and beta
            const int t = warp;
            float qss = 0.0f, kss = 0.0f;
            for (int e = lane; e < dk; e += 32) {
                qss += qs[t][e] * qs[t][e];
                kss += ks[t][e] * ks[t][e];
            }
            const float qr = rsqrtf(warp_sum(qss) + 1e-6f) * qscale, kr = rsqrtf(warp_sum(kss) + 1e-6f);
            float kq = 0.0f;
            for (int e = lane; e < dk; e += 32) {
                const float qn = qs[t][e] * qr, kn = ks[t][e] * kr;
                qs[t][e] = qn;
                ks[t][e] = kn;
                kq += qn * kn;
            }
            kq = warp_sum(kq);
            if (lane == 0) {
                kq_s[t] = kq;
                decay_s[t] = expf(-A * gdn::softplus_(av_s[t] + dtb));
                beta_s[t] = 1.0f / (1.0f + expf(-bv_s[t]));
            }
        }
        __syncthreads();
        for (int t = 0; t < nt; ++t) {
            const int par = t & 1;  // part[par] was last read two tokens ago, before the previous barrier
            float sk = 0.0f, sq = 0.0f;
#pragma unroll
            for (int m = 0; m < kRowsPerThread; ++m) {
                if (m < nr) {
                    sk += s[m] * ks[t][ty + m * kRowGroups];
                    sq += s[m] * qs[t][ty + m * kRowGroups];
                }
            }
            part[par][0][ty][tx] = sk;
            part[par][1][ty][tx] = sq;
            __syncthreads();
            float SK = 0.0f, SQ = 0.0f;
#pragma unroll
            for (int g = 0; g < kRowGroups; ++g) {
                SK += part[par][0][g][tx];
                SQ += part[par][1][g][tx];
            }
            const float decay = decay_s[t];
            const float u = beta_s[t] * (vs[t][tx] - decay * SK);
#pragma unroll
            for (int m = 0; m < kRowsPerThread; ++m)
                if (m < nr) s[m] = s[m] * decay + ks[t][ty + m * kRowGroups] * u;
            if (ty == 0) os[t][tx] = col_ok ? round_as(p.odt, decay * SQ + u * kq_s[t]) : 0.0f;
        }
        __syncthreads();
        if (warp < nt) {  // warp t (lane = column): this block's part of token t's sum of squares
            const float o = os[warp][lane];
            const float ss = warp_sum(o * o);
            if (lane == 0) ss_s[warp] = ss;
        }
        cluster.sync();  // every block's ss_s is written
        if (warp < nt) {  // the head's sum in rank order, then the gated RMSNorm of this block's columns
            const int t = warp;
            float ss = 0.0f;
            for (int r = 0; r < nsplit; ++r) ss += cluster.map_shared_rank(ss_s, r)[t];
            const float rn = rsqrtf(ss / static_cast<float>(dv) + p.eps);
            const int64_t col = static_cast<int64_t>(rank) * kSplitCols + lane;
            if (col < dv) {
                const float zc = zs[t][lane];
                st(p.out, p.odt, ((t0 + t) * p.Hv + h) * dv + col,
                   ld(p.w, p.wdt, col) * os[t][lane] * rn * zc * sigmoidf_(zc));
            }
        }
        cluster.sync();  // the other blocks have read ss_s; the next tile rewrites the tile buffers
    }
    gdn::store_state<kRowGroups>(s, S, nr, ty, j, dv, col_ok);
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

static void launch_gdn_split(const StepArgs& p, cudaStream_t s) {
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

void gdn_step_fused(const Tensor& conv, const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                    Tensor& state, const Tensor& z, const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out,
                    cudaStream_t s) {
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
    if (a.numel() != p.T * p.Hv || b.numel() != p.T * p.Hv || A_log.numel() != p.Hv || dt_bias.numel() != p.Hv ||
        z.numel() != p.T * p.Hv * p.dv || norm_w.numel() != p.dv || out.numel() != p.T * p.Hv * p.dv)
        throw Error("cuda gdn_core: a, b [T, Hv], A_log, dt_bias [Hv], z, out [T, Hv * dv], norm [dv]");
    if (p.T == 0) return;
    p.conv = conv.data; p.cdt = dt_code(conv.dtype, op, "conv");
    p.a = a.data; p.adt = dt_code(a.dtype, op, "a");
    p.b = b.data; p.bdt = dt_code(b.dtype, op, "b");
    p.A_log = A_log.data; p.Adt = dt_code(A_log.dtype, op, "A_log");
    p.dt_bias = dt_bias.data; p.ddt = dt_code(dt_bias.dtype, op, "dt_bias");
    p.z = z.data; p.zdt = dt_code(z.dtype, op, "z");
    p.w = norm_w.data; p.wdt = dt_code(norm_w.dtype, op, "norm_w");
    p.state = state.ptr<float>();
    p.out = out.data; p.odt = dt_code(out.dtype, op, "out");
    p.eps = eps;
    if (gdn_split_enabled(p.dv))
        launch_gdn_split(p, s);
    else if (p.T == 1)
        launch_pdl(gdn_step1_kernel, dim3(static_cast<unsigned>(p.Hv)), dim3(kRowGroups * kCols), 0, s, p);
    else
        launch_pdl(gdn_step_tiled_kernel, dim3(static_cast<unsigned>(p.Hv)), dim3(kRowGroups * kCols), 0, s,
                   p);
    check_launch("gdn_core step");
}

}  // namespace grimoire::cuda
