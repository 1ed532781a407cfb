// Gated DeltaNet prefill, chunked (C = 64) on tensor cores; BF16 q, k, v. Same math as the CPU twin
// (cpu/gated_delta_chunked.cpp), with the normalisations pulled out of the products so that q, k and v enter
// the tensor cores exactly as stored (raw BF16): with rk_i, rq_i the inverse norms of the raw rows (rq also
// holding dk^-1/2), gamma the in-chunk cumulative log-decay and K, Q, V the raw chunk rows,
//   A   = StrictLower(beta_i rk_i rk_j (K K^T)_ij e^(gamma_i - gamma_j)),  T' = (I + A)^-1 diag(beta)
//   P   = Lower(rq_i rk_j (Q K^T)_ij e^(gamma_i - gamma_j))  (with the diagonal),  PT = P T'
//   R   = V - diag(e^gamma rk) K S                        (so that V' = U - W S = T' R)
//   O   = diag(e^gamma rq) Q S + PT R
//   S  <- e^gamma_C S + K^T diag(e^(gamma_C - gamma) rk) T' R
//
// Kernel 1 (prep), grid (chunk, value head), fully parallel: K K^T and Q K^T on tensor cores, A, P, the
// triangular inverse in fp32 by 16 x 16 blocks on all warps (unit_lower_inverse), PT = P T' on tensor cores
// (hi/lo split); writes T' and PT to the workspace as hi/lo BF16 pairs plus the row scalars.
// Kernel 2 (scan), grid (value head, 32-column slice of dv), sequential over chunks: the fp32 state slice
// S [dk, 32] lives in mma accumulators (warp w owns rows 16w..16w+15; long prompts run 64-column slices on
// 16 warps, see ScanCfg / scan_width); per chunk K S and Q S, T' R and PT R,
// K^T V'' run as m16n8k16 BF16 mma with every fp32 operand (S, R, T', PT, V'') split into hi + lo BF16 (q, k,
// v are exact in BF16), so the result matches fp32 arithmetic to ~2^-17 relative; the state stays fp32.
// Columns of S never mix, so the 4 slices of a head run in parallel and 2 blocks share an SM (113 KB each).
// On Hopper the scan is a programmatic dependent launch of the prep (see pdl_on).
// Rows past T in the last chunk have beta = g = 0 and zero q, k, v, which leaves the state alone.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gdn_chunk_mma.cuh"
#include "kernels/cuda/gdn_impl.h"
#include "kernels/cuda/gdn_recurrence.cuh"

namespace grimoire::cuda::gdn {

namespace {
constexpr int C = kChunk;      // 64 tokens per chunk
constexpr int DK = 128;        // key head dim the tiles hold (smaller dk is zero-padded)
constexpr int LDK = DK + 8;    // bf16 row stride of [.][DK] tiles: +16 bytes makes fragment loads conflict-free
constexpr int LDC = C + 8;     // bf16 row stride of [.][C] tiles
constexpr int LDF = C + 4;     // fp32 row stride of the prep kernel's [C][C] tiles (rows 16-byte aligned)
constexpr int kThreads = 256;  // 8 warps in the prep kernel

// One (chunk, value head) record of the workspace, in bytes: T' and PT [C][C] as hi and lo BF16 planes, then
// the row scalars cK = e^gamma rk, cQ = e^gamma rq, cD = e^(gamma_C - gamma) rk [C] f32 and e^gamma_C.
struct Rec {
    static constexpr size_t kPlane = static_cast<size_t>(C) * C * sizeof(bf16);
    static constexpr size_t kScal = 4 * kPlane;  // planes: T' hi, T' lo, PT hi, PT lo
    static constexpr size_t kBytes = kScal + 4 * C * sizeof(float);
};

// Scan kernel shared memory, in bf16 elements (offsets stay 16-byte aligned), for BV state columns per block;
// NB = 2 double-buffers the v slice and the record (T', PT planes and scalars) of the BV = 64 variant.
template <int BV, int NB>
struct ScanSmem {
    static constexpr int LDV = BV + 8;               // bf16 row stride of the V slice
    static constexpr int kK = 0;                     // [C][LDK] raw k rows (q rows on odd chunks)
    static constexpr int kQ = kK + C * LDK;          // [C][LDK] raw q rows (k rows on odd chunks)
    static constexpr int kV = kQ + C * LDK;          // NB x [C][LDV] raw v slice
    static constexpr int kVStep = C * LDV;
    static constexpr int kT = kV + NB * kVStep;      // NB x (4 x [C][LDC]: T' hi, T' lo, PT hi, PT lo; 4 * C floats)
    static constexpr int kTStep = 4 * C * LDC + 8 * C;
    static constexpr int kScal = 4 * C * LDC;        // record scalars, from the buffer's start
    static constexpr int kS = kT + NB * kTStep;      // 2 x [BV][LDK]: S^T hi, lo
    static constexpr int kR = kS + 2 * BV * LDK;     // 2 x [BV][LDC]: R^T hi, lo
    static constexpr int kW = kR + 2 * BV * LDC;     // 2 x [BV][LDC]: V''^T hi, lo
    static constexpr int kEnd = kW + 2 * BV * LDC;
    static constexpr size_t kBytes = static_cast<size_t>(kEnd) * sizeof(bf16);
};
static_assert(ScanSmem<32, 1>::kBytes <= 116 * 1024, "two BV = 32 scan blocks must fit one SM");
static_assert(ScanSmem<64, 2>::kBytes <= 227 * 1024, "a BV = 64 scan block must fit one SM");

// Prep kernel shared memory, in bytes. A (fp32) takes the k tile's place once K K^T is done, which keeps the
// block at 72 KB (3 per SM).
struct PrepSmem {
    static constexpr size_t kK = 0;                             // [C][LDK] bf16 raw k, then A [C][LDF] f32
    static constexpr size_t kQ = kK + C * LDK * sizeof(bf16);   // [C][LDK] bf16 raw q
    static constexpr size_t kP = kQ + C * LDK * sizeof(bf16);   // 2 x [C][LDC] bf16: P hi, lo
    static constexpr size_t kT = kP + 2 * C * LDC * sizeof(bf16);  // 2 x [C][LDC] bf16: T'^T hi, lo
    static constexpr size_t kRow = kT + 2 * C * LDC * sizeof(bf16);  // beta, gamma, rk, rq [C] each
    static constexpr size_t kBytes = kRow + 4 * C * sizeof(float);
};
static_assert(C * LDF * sizeof(float) <= C * LDK * sizeof(bf16), "A fits where the k tile was");

__device__ __forceinline__ const bf16* bf(const void* p) { return static_cast<const bf16*>(p); }
}  // namespace

bool tc_supported(const GdnParams& p) {
    auto al16 = [](const void* x) { return (reinterpret_cast<uintptr_t>(x) & 15) == 0; };
    return p.qdt == kBF16 && p.kdt == kBF16 && p.vdt == kBF16 && p.dk <= DK && p.dk % 8 == 0 && p.dv % 8 == 0 &&
           al16(p.q) && al16(p.k) && al16(p.v) && p.qs % 8 == 0 && p.ks % 8 == 0 && p.vs % 8 == 0;
}

size_t tc_ws_bytes(int64_t T, int64_t Hv) {
    return static_cast<size_t>((T + C - 1) / C) * static_cast<size_t>(Hv) * Rec::kBytes;
}

// X = (I + A)^-1 for A [C][LDF] f32 strictly lower triangular, by 16 x 16 blocks (the serial forward
// substitution, one column per thread, is a 64-step dependent chain on 2 of the 8 warps): the diagonal blocks
// by forward substitution (64 threads, 16 steps), then the blocks below them one sub-diagonal at a time,
// X_ij = -X_ii sum_{k=j}^{i-1} A_ik X_kj, with 256 threads over the outputs (Y: 3 [16][16] f32 of scratch).
// Blocks above the diagonal are not written (callers treat them as zero).
constexpr int kSolveBlock = 16;
__device__ __forceinline__ void unit_lower_inverse(const float* A, float* X, float* Y, int tid) {
    constexpr int B = kSolveBlock, NB = C / B;
    if (tid < C) {
        const int j = tid, b0 = (j / B) * B;
        float t[B];
#pragma unroll
        for (int il = 0; il < B; ++il) {
            const int i = b0 + il;
            float s = i == j ? 1.0f : 0.0f;
#pragma unroll
            for (int ml = 0; ml < il; ++ml) s -= A[i * LDF + b0 + ml] * t[ml];
            t[il] = s;
            X[i * LDF + j] = s;
        }
    }
    __syncthreads();
    for (int d = 1; d < NB; ++d) {  // block pairs (i, j) = (d + q, q), q < NB - d
        const int n = (NB - d) * B * B;
        for (int o = tid; o < n; o += kThreads) {
            const int q = o / (B * B), r = (o / B) % B, cl = o % B, i = d + q, j = q;
            float s = 0.0f;
            for (int k = j; k < i; ++k) {
                const float* ar = A + (B * i + r) * LDF + B * k;
                const float* xc = X + B * k * LDF + B * j + cl;
#pragma unroll
                for (int m = 0; m < B; m += 4) {
                    const float4 a4 = *reinterpret_cast<const float4*>(ar + m);
                    s += a4.x * xc[m * LDF] + a4.y * xc[(m + 1) * LDF] + a4.z * xc[(m + 2) * LDF] +
                         a4.w * xc[(m + 3) * LDF];
                }
            }
            Y[o] = s;
        }
        __syncthreads();
        for (int o = tid; o < n; o += kThreads) {
            const int q = o / (B * B), r = (o / B) % B, cl = o % B, i = d + q, j = q;
            const float* xr = X + (B * i + r) * LDF + B * i;  // X_ii row r (zero past the diagonal)
            const float* yc = Y + q * B * B + cl;
            float s = 0.0f;
#pragma unroll
            for (int m = 0; m < B; m += 4) {
                const float4 x4 = *reinterpret_cast<const float4*>(xr + m);
                s += x4.x * yc[m * B] + x4.y * yc[(m + 1) * B] + x4.z * yc[(m + 2) * B] + x4.w * yc[(m + 3) * B];
            }
            X[(B * i + r) * LDF + B * j + cl] = -s;
        }
        __syncthreads();
    }
}

// Diagnostic phase clocks (GRIMOIRE_GDN_TRACE=1, direct launches only): thread 0 of each block stamps
// clock64 at the block's barriers (prep) or sums the cycles of each phase over the chunks (scan), plus the
// global timer at its start and end; the launcher prints the means over blocks.
constexpr int kTraceSlots = 10;
__device__ __forceinline__ long long gtimer() {
    long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

// 3 blocks per SM (72 KB of shared memory and <= 85 registers each): a 512-token prompt's 384 blocks in one wave.
template <bool kTrace>
static __global__ void __launch_bounds__(kThreads, 3) gdn_tc_prep_kernel(GdnParams p, unsigned char* ws,
                                                                        long long* trace) {
    long long* tr = kTrace ? trace + (static_cast<size_t>(blockIdx.y) * gridDim.x + blockIdx.x) * kTraceSlots : nullptr;
    if (kTrace && threadIdx.x == 0) tr[8] = gtimer(), tr[0] = clock64();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The scan may launch (programmatic dependent launch) once every prep block has started: it takes SMs
    // as prep blocks of the last wave finish and waits for this grid before it reads the records.
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    extern __shared__ __align__(128) unsigned char smraw[];
    bf16* Ks = reinterpret_cast<bf16*>(smraw + PrepSmem::kK);
    bf16* Qs = reinterpret_cast<bf16*>(smraw + PrepSmem::kQ);
    float* As = reinterpret_cast<float*>(smraw + PrepSmem::kK);  // after K K^T
    bf16* Ph = reinterpret_cast<bf16*>(smraw + PrepSmem::kP);
    bf16* Pl = Ph + C * LDC;
    bf16* Tth = reinterpret_cast<bf16*>(smraw + PrepSmem::kT);  // T' transposed: [j][i]
    bf16* Ttl = Tth + C * LDC;
    float* beta = reinterpret_cast<float*>(smraw + PrepSmem::kRow);
    float* gam = beta + C;
    float* rk = gam + C;
    float* rq = rk + C;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t c = blockIdx.x, h = blockIdx.y, kh = h / (p.Hv / p.Hk), t0 = c * C;

    // Raw q, k rows of the chunk (zeros past T and past dk) through cp.async, so all of a thread's copies are in
    // flight at once; meanwhile thread r < C loads row r's a and b (beta = sigmoid(b), g; zero past T). Both
    // were dependent round trips before: the rows' a / b loads ran one after another in each warp's lane 0.
    for (int e = tid; e < 2 * C * (DK / 8); e += kThreads) {
        const int which = e / (C * (DK / 8)), r = (e / (DK / 8)) % C, col = (e % (DK / 8)) * 8;
        const int64_t t = t0 + r;
        const bool ok = t < p.T && col < p.dk;
        const bf16* src = bf(which ? p.q : p.k);
        cp_async16((which ? Qs : Ks) + r * LDK + col, ok ? src + t * (which ? p.qs : p.ks) + kh * p.dk + col : src,
                   ok);
    }
    cp_async_commit();
    if (tid < C) {
        const int64_t t = t0 + tid;
        const bool ok = t < p.T;
        const float Aexp = expf(ld(p.A_log, p.Adt, h)), dtb = ld(p.dt_bias, p.ddt, h);
        const float bv = ok ? ld(p.b, p.bdt, t * p.ab_s + h) : 0.0f, av = ok ? ld(p.a, p.adt, t * p.ab_s + h) : 0.0f;
        beta[tid] = ok ? 1.0f / (1.0f + expf(-bv)) : 0.0f;
        gam[tid] = ok ? -Aexp * softplus_(av + dtb) : 0.0f;
    }
    cp_async_wait_all();
    __syncthreads();
    if (kTrace && threadIdx.x == 0) tr[1] = clock64();
    if (tid == 0) {  // inclusive cumulative sum, in the CPU twin's (sequential) order, through registers
        float g[C];
#pragma unroll
        for (int r = 0; r < C; r += 4) *reinterpret_cast<float4*>(g + r) = *reinterpret_cast<const float4*>(gam + r);
#pragma unroll
        for (int r = 1; r < C; ++r) g[r] += g[r - 1];
#pragma unroll
        for (int r = 0; r < C; r += 4) *reinterpret_cast<float4*>(gam + r) = *reinterpret_cast<const float4*>(g + r);
    }
    // Per row: inverse norms (q's with dk^-1/2). One warp per row.
    for (int r = warp; r < C; r += kThreads / 32) {
        float ks = 0.0f, qs = 0.0f;
        for (int i = lane; i < DK; i += 32) {
            const float kv = __bfloat162float(Ks[r * LDK + i]), qv = __bfloat162float(Qs[r * LDK + i]);
            ks += kv * kv;
            qs += qv * qv;
        }
        ks = warp_sum(ks);
        qs = warp_sum(qs);
        if (lane == 0) {
            rk[r] = rsqrtf(ks + 1e-6f);
            rq[r] = rsqrtf(qs + 1e-6f) * rsqrtf(static_cast<float>(p.dk));
        }
    }
    __syncthreads();
    if (kTrace && threadIdx.x == 0) tr[2] = clock64();

    // K K^T (warps 0-3) and Q K^T (warps 4-7), lower-triangular 16x8 tiles of row tile mt = warp % 4.
    {
        const int mt = warp & 3;
        const bool isq = warp >= 4;
        const bf16* src = isq ? Qs : Ks;
        float acc[8][4] = {};
        const int nks = static_cast<int>((p.dk + 15) / 16);
        for (int ks = 0; ks < nks; ++ks) {
            uint32_t a[4];
            frag_a(a, src, LDK, 16 * mt, 16 * ks, lane);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                if (np <= mt) {  // n tiles 2 np, 2 np + 1: the lower triangle and the diagonal block
                    uint32_t b[2][2];
                    frag_b2(b, Ks, LDK, 16 * np, 16 * ks, lane);
                    mma(acc[2 * np], a, b[0]);
                    mma(acc[2 * np + 1], a, b[1]);
                }
            }
        }
        __syncthreads();  // every warp is done with the k tile: A may overwrite it
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            if (nt > 2 * mt + 1) continue;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = 16 * mt + (lane >> 2) + (e >> 1) * 8, j = 8 * nt + 2 * (lane & 3) + (e & 1);
                const float d = j <= i ? expf(gam[i] - gam[j]) : 0.0f;  // exponent <= 0 where taken
                if (isq) split_bf16(rq[i] * rk[j] * acc[nt][e] * d, Ph[i * LDC + j], Pl[i * LDC + j]);
                else As[i * LDF + j] = j < i ? beta[i] * rk[i] * rk[j] * acc[nt][e] * d : 0.0f;
            }
        }
    }
    __syncthreads();
    if (kTrace && threadIdx.x == 0) tr[3] = clock64();

    unsigned char* rec = ws + (static_cast<size_t>(c) * p.Hv + h) * Rec::kBytes;
    bf16* planes = reinterpret_cast<bf16*>(rec);  // T' hi, T' lo, PT hi, PT lo, each [C][C]

    // T' = (I + A)^-1 diag(beta) by 16 x 16 blocks on all 8 warps (see unit_lower_inverse), then written as
    // hi/lo: to the record row-major (coalesced over j) and here transposed, the B operand of P T'.
    float* X = reinterpret_cast<float*>(smraw + PrepSmem::kQ);  // [C][LDF] f32 where the q tile was
    unit_lower_inverse(As, X, reinterpret_cast<float*>(smraw + PrepSmem::kT), tid);
    for (int e = tid; e < C * C; e += kThreads) {
        const int i = e / C, j = e % C;
        bf16 hi, lo;
        split_bf16(i / kSolveBlock >= j / kSolveBlock ? X[i * LDF + j] * beta[j] : 0.0f, hi, lo);
        planes[i * C + j] = hi;
        planes[C * C + i * C + j] = lo;
        Tth[j * LDC + i] = hi;
        Ttl[j * LDC + i] = lo;
    }
    __syncthreads();
    if (kTrace && threadIdx.x == 0) tr[4] = clock64();

    // PT = P T' on tensor cores (both split): warp tile rows 16 mt, columns 32 nh .. + 31; both factors are
    // lower triangular, so k tiles past mt are zero.
    {
        const int mt = warp & 3, nh = warp >> 2;
        float acc[4][4] = {};
        for (int ks = 0; ks <= mt; ++ks) {
            uint32_t ah[4], al[4];
            frag_a(ah, Ph, LDC, 16 * mt, 16 * ks, lane);
            frag_a(al, Pl, LDC, 16 * mt, 16 * ks, lane);
#pragma unroll
            for (int np = 0; np < 2; ++np) {
                uint32_t bh[2][2], bl[2][2];
                frag_b2(bh, Tth, LDC, 32 * nh + 16 * np, 16 * ks, lane);
                frag_b2(bl, Ttl, LDC, 32 * nh + 16 * np, 16 * ks, lane);
                mma3(acc[2 * np], ah, al, bh[0], bl[0]);
                mma3(acc[2 * np + 1], ah, al, bh[1], bl[1]);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                const int i = 16 * mt + (lane >> 2) + (e >> 1) * 8, j = 32 * nh + 8 * nt + 2 * (lane & 3);
                bf16 h0, l0, h1, l1;
                split_bf16(acc[nt][e], h0, l0);
                split_bf16(acc[nt][e + 1], h1, l1);
                *reinterpret_cast<__nv_bfloat162*>(planes + 2 * C * C + i * C + j) = __halves2bfloat162(h0, h1);
                *reinterpret_cast<__nv_bfloat162*>(planes + 3 * C * C + i * C + j) = __halves2bfloat162(l0, l1);
            }
    }
    if (tid < C) {
        float* sc = reinterpret_cast<float*>(rec + Rec::kScal);
        const bool ok = t0 + tid < p.T;
        const float eg = expf(gam[tid]), gC = gam[C - 1];
        sc[tid] = ok ? eg * rk[tid] : 0.0f;
        sc[C + tid] = ok ? eg * rq[tid] : 0.0f;
        sc[2 * C + tid] = ok ? expf(gC - gam[tid]) * rk[tid] : 0.0f;
        if (tid == 0) sc[3 * C] = expf(gC);
    }
    if (kTrace) {
        __syncthreads();
        if (threadIdx.x == 0) tr[5] = clock64(), tr[9] = gtimer();
    }
}

// BV = 32: 8 warps, 2 blocks per SM (the default). BV = 64: 16 warps, one block per SM, the v slice and the
// record of chunk c + 1 loading (into the other buffer) from the middle of chunk c instead of its end.
template <int BV>
struct ScanCfg {
    static constexpr int kWarps = BV / 4;  // 4 token tiles x BV / 16 column tiles of the [C][BV] products
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kNB = BV == 64 ? 2 : 1;
    static constexpr int kMinBlocks = BV == 64 ? 1 : 2;
    using Smem = ScanSmem<BV, kNB>;
};

template <int BV, bool kTrace>
static __global__ void __launch_bounds__(ScanCfg<BV>::kThreads, ScanCfg<BV>::kMinBlocks)
    gdn_tc_scan_kernel(GdnParams p, const unsigned char* ws, long long* trace) {
    using Cfg = ScanCfg<BV>;
    using SS = typename Cfg::Smem;
    constexpr int NT = Cfg::kThreads, NB = Cfg::kNB, LDV = SS::LDV;
    extern __shared__ __align__(128) unsigned char smraw[];
    bf16* sm = reinterpret_cast<bf16*>(smraw);
    bf16* Ks = sm + SS::kK;
    bf16* Qs = sm + SS::kQ;
    bf16* Sh = sm + SS::kS;
    bf16* Sl = Sh + BV * LDK;
    bf16* Rh = sm + SS::kR;
    bf16* Rl = Rh + BV * LDC;
    bf16* Wh = sm + SS::kW;
    bf16* Wl = Wh + BV * LDC;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, cc = 2 * (lane & 3);
    const int64_t h = blockIdx.x, kh = h / (p.Hv / p.Hk), col0 = static_cast<int64_t>(blockIdx.y) * BV;
    const int64_t dk = p.dk, dv = p.dv, nchunks = (p.T + C - 1) / C;
    // Trace: trs[k] sums the cycles of phase k over the chunks, trs[7] holds the last stamp.
    __shared__ long long trs[8];
    long long* tr = kTrace ? trace + (static_cast<size_t>(blockIdx.y) * gridDim.x + blockIdx.x) * kTraceSlots : nullptr;
    auto stamp = [&](int k) {
        if (kTrace && tid == 0) {
            const long long now = clock64();
            if (k >= 0) trs[k] += now - trs[7];
            trs[7] = now;
        }
    };
    if (kTrace && tid == 0) {
        for (int k = 0; k < 7; ++k) trs[k] = 0;
        tr[8] = gtimer();
    }
    const bf16* qg = bf(p.q);
    const bf16* kg = bf(p.k);
    const bf16* vg = bf(p.v);

    auto load_rows = [&](bf16* dst, const bf16* src, int64_t rs, int64_t c) {  // raw q or k rows of chunk c
        for (int e = tid; e < C * (DK / 8); e += NT) {
            const int r = e / (DK / 8), col = (e % (DK / 8)) * 8;
            const int64_t t = c * C + r;
            const bool ok = t < p.T && col < dk;
            cp_async16(dst + r * LDK + col, ok ? src + t * rs + kh * dk + col : src, ok);
        }
    };
    // Chunk c's v slice and record live in buffer c % NB.
    auto vbuf = [&](int64_t c) { return sm + SS::kV + (c % NB) * SS::kVStep; };
    auto tbuf = [&](int64_t c) { return sm + SS::kT + (c % NB) * SS::kTStep; };
    static_assert(C * (BV / 8) == NT, "one 16-byte piece of the v slice per thread");
    auto load_v = [&](int64_t c) {  // 64 rows x BV / 8 pieces
        const int r = tid / (BV / 8), col = (tid % (BV / 8)) * 8;
        const int64_t t = c * C + r;
        const bool ok = t < p.T && col0 + col < dv;
        cp_async16(vbuf(c) + r * LDV + col, ok ? vg + t * p.vs + h * dv + col0 + col : vg, ok);
    };
    auto load_rec = [&](int64_t c) {
        const unsigned char* rec = ws + (static_cast<size_t>(c) * p.Hv + h) * Rec::kBytes;
        bf16* dst = tbuf(c);
        for (int e = tid; e < 4 * C * (C / 8); e += NT) {
            const int plane = e / (C * (C / 8)), r = (e / (C / 8)) % C, col = (e % (C / 8)) * 8;
            cp_async16(dst + plane * C * LDC + r * LDC + col, rec + plane * Rec::kPlane + (r * C + col) * sizeof(bf16),
                       true);
        }
        if (tid < C) cp_async16(dst + SS::kScal + tid * 8, rec + Rec::kScal + tid * 16, true);
    };

    // State rows 16 (warp % 8) .. + 15, columns col0 + cb .. + 31 as 4 accumulator tiles.
    float* Sg = p.state + h * dk * dv;
    const int d0 = 16 * (warp & 7), cb = 32 * (warp >> 3);
    float s[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t d = d0 + g + (e >> 1) * 8, col = col0 + cb + 8 * j + cc + (e & 1);
            s[j][e] = d < dk && col < dv ? Sg[d * dv + col] : 0.0f;
        }
    auto write_state_operand = [&]() {  // S^T [BV][DK] as hi/lo: the B operand of K S and Q S
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int off = (cb + 8 * j + cc + (e & 1)) * LDK + d0 + g + (e >> 1) * 8;
                split_bf16(s[j][e], Sh[off], Sl[off]);
            }
    };

    // The k and q tiles trade places every chunk: k of chunk c + 1 loads into the tile q of chunk c leaves
    // (after O = Q S) and lands during the state update, which still reads k of chunk c; q of chunk c + 1
    // then loads into that tile and lands during the next K S. Two commit groups per chunk: {k, v, record}
    // (waited for at the top) and {q} (waited for before Q S). With NB = 2 the v slice and the record of chunk
    // c + 1 form a group of their own, issued once q of chunk c has landed (before Q S), so the top of chunk
    // c + 1 still waits for all but the newest group ({q}).
    load_rows(Ks, kg, p.ks, 0);
    load_v(0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // Launched as a programmatic dependent of the prep (Hopper): the state, k and v above were written before
    // the prep started; the records need the prep done. Without the launch attribute this returns at once.
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    load_rec(0);
    cp_async_commit();
    load_rows(Qs, qg, p.qs, 0);
    cp_async_commit();
    write_state_operand();
    const int mt = warp & 3, nh = warp >> 2;  // token tile and column half of the [C][BV] products
    // acc [16 x 16] += rows 16 mt.. of x [C][DK] (raw k or q) times columns 16 nh.. of S (hi + lo) over dk.
    auto times_state = [&](float (&acc)[2][4], const bf16* x) {
#pragma unroll
        for (int ks = 0; ks < DK / 16; ++ks) {  // columns past dk are zeros in k, q and S
            uint32_t a[4];
            frag_a(a, x, LDK, 16 * mt, 16 * ks, lane);
            uint32_t bh[2][2], bl[2][2];
            frag_b2(bh, Sh, LDK, 16 * nh, 16 * ks, lane);
            frag_b2(bl, Sl, LDK, 16 * nh, 16 * ks, lane);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) mma2(acc[nt], a, bh[nt], bl[nt]);
        }
    };
    stamp(-1);
    for (int64_t c = 0; c < nchunks; ++c) {
        cp_async_wait_all_but_last();
        __syncthreads();
        stamp(0);  // phase 0: k, v, record of this chunk landed
        const bool more = c + 1 < nchunks;
        bf16* kt = c & 1 ? Qs : Ks;  // k rows of this chunk
        bf16* qt = c & 1 ? Ks : Qs;  // q rows of this chunk
        const bf16* Vs = vbuf(c);
        const bf16* Th = tbuf(c);  // then T' lo, PT hi, PT lo at + C * LDC each, the scalars at SS::kScal
        const bf16* Tl = Th + C * LDC;
        const bf16* Ph = Tl + C * LDC;
        const bf16* Pl = Ph + C * LDC;
        const float* sc = reinterpret_cast<const float*>(Th + SS::kScal);

        // Y = K S over dk; then R = V - cK Y (stored transposed, hi/lo).
        float y[2][4] = {};
        times_state(y, kt);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = 16 * mt + g + (e >> 1) * 8, n = 16 * nh + 8 * nt + cc + (e & 1);
                const float rv = __bfloat162float(Vs[r * LDV + n]) - sc[r] * y[nt][e];
                split_bf16(rv, Rh[n * LDC + r], Rl[n * LDC + r]);
            }
        stamp(1);  // phase 1: K S, R
        cp_async_wait_all();
        __syncthreads();  // R complete, q of this chunk landed
        stamp(2);  // phase 2: q landed, barrier
        if (NB == 2 && more) {  // the other buffer was last read by chunk c - 1
            load_v(c + 1);
            load_rec(c + 1);
            cp_async_commit();
        }

        // O = cQ (Q S) over dk (S is still the incoming state).
        float o[2][4] = {};
        times_state(o, qt);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[nt][e] *= sc[C + 16 * mt + g + (e >> 1) * 8];

        // V' = T' R and O += PT R; both lower triangular, so only k tiles ks <= mt contribute.
        float w[2][4] = {};
        for (int ks = 0; ks <= mt; ++ks) {
            uint32_t th[4], tl[4], ph[4], pl[4];
            frag_a(th, Th, LDC, 16 * mt, 16 * ks, lane);
            frag_a(tl, Tl, LDC, 16 * mt, 16 * ks, lane);
            frag_a(ph, Ph, LDC, 16 * mt, 16 * ks, lane);
            frag_a(pl, Pl, LDC, 16 * mt, 16 * ks, lane);
            uint32_t rh[2][2], rl[2][2];
            frag_b2(rh, Rh, LDC, 16 * nh, 16 * ks, lane);
            frag_b2(rl, Rl, LDC, 16 * nh, 16 * ks, lane);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                mma3(w[nt], th, tl, rh[nt], rl[nt]);
                mma3(o[nt], ph, pl, rh[nt], rl[nt]);
            }
        }
        // Output rows of this chunk; V'' = cD V' transposed (hi/lo), the B operand of the state update.
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                const int r = 16 * mt + g + (e >> 1) * 8, n = 16 * nh + 8 * nt + cc;
                const int64_t t = c * C + r, col = col0 + n;
                if (t < p.T && col < dv) {  // dv % 8 == 0: col + 1 is in range too
                    const int64_t oi = (t * p.Hv + h) * dv + col;
                    if (p.odt == kBF16) {
                        *reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(p.out) + oi) =
                            __floats2bfloat162_rn(o[nt][e], o[nt][e + 1]);
                    } else {
                        st(p.out, p.odt, oi, o[nt][e]);
                        st(p.out, p.odt, oi + 1, o[nt][e + 1]);
                    }
                }
                const float cd = sc[2 * C + r];
                split_bf16(cd * w[nt][e], Wh[n * LDC + r], Wl[n * LDC + r]);
                split_bf16(cd * w[nt][e + 1], Wh[(n + 1) * LDC + r], Wl[(n + 1) * LDC + r]);
            }
        const float eg = sc[3 * C];
        stamp(3);  // phase 3: Q S, T' R, PT R, output, V''
        __syncthreads();  // V'' complete; q, v, T', PT and the scalars of this chunk no longer read
        if (more) {
            load_rows(qt, kg, p.ks, c + 1);
            if (NB == 1) {
                load_v(c + 1);
                load_rec(c + 1);
            }
            cp_async_commit();
        }

        // S = e^gamma_C S + K^T V'' (A = K^T through ldmatrix.trans of the row-major k tile).
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] *= eg;
#pragma unroll
        for (int ks = 0; ks < C / 16; ++ks) {
            uint32_t a[4];
            frag_a_trans(a, kt, LDK, d0, 16 * ks, lane);
#pragma unroll
            for (int jp = 0; jp < 2; ++jp) {
                uint32_t bh[2][2], bl[2][2];
                frag_b2(bh, Wh, LDC, cb + 16 * jp, 16 * ks, lane);
                frag_b2(bl, Wl, LDC, cb + 16 * jp, 16 * ks, lane);
                mma2(s[2 * jp], a, bh[0], bl[0]);
                mma2(s[2 * jp + 1], a, bh[1], bl[1]);
            }
        }
        stamp(4);  // phase 4: barrier, next loads issued, state update
        write_state_operand();
        __syncthreads();  // k of this chunk no longer read
        if (more) {
            load_rows(kt, qg, p.qs, c + 1);
            cp_async_commit();
        }
        stamp(5);  // phase 5: state operand, barrier, q issued
    }
    if (kTrace && tid == 0) {
        for (int k = 0; k < 6; ++k) tr[k] = trs[k];
        tr[9] = gtimer();
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t d = d0 + g + (e >> 1) * 8, col = col0 + cb + 8 * j + cc + (e & 1);
            if (d < dk && col < dv) Sg[d * dv + col] = s[j][e];
        }
}

static int env_int(const char* name, int dflt) {
    const char* e = std::getenv(name);
    return e && *e ? std::atoi(e) : dflt;
}

// Programmatic dependent launch of the scan on Hopper (GRIMOIRE_GDN_PDL=0 turns it off): it launches while the
// prep's last blocks run instead of after the grid drains, and loads its state, k and v before it waits.
static bool pdl_on() {
    static const bool on = device_is_hopper() && env_int("GRIMOIRE_GDN_PDL", 1) != 0;
    return on;
}

// Scan width: BV = 64 (one 16-warp block per SM, the record double-buffered) from T = 2048 where the device
// grants its 196 KB of shared memory (H200, T = 4096: 0.670 -> 0.629 ms per call); BV = 32 below (T = 512:
// 0.090 / 0.091 ms, the same) and on parts with less shared memory. GRIMOIRE_GDN_BV64=0 / 1 forces either.
static int scan_width(int64_t T) {
    static const bool fits =
        static_cast<size_t>(device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin)) >= ScanCfg<64>::Smem::kBytes;
    static const int forced = env_int("GRIMOIRE_GDN_BV64", -1);
    if (forced >= 0) return forced && fits ? 64 : 32;
    return fits && T >= 2048 ? 64 : 32;
}

template <int BV, bool kTrace>
static void launch_scan(const GdnParams& p, const unsigned char* w, long long* trace, cudaStream_t s) {
    using Cfg = ScanCfg<BV>;
    static bool attrs = false;  // raise the dynamic shared-memory limit once
    if (!attrs) {
        cudaFuncSetAttribute(gdn_tc_scan_kernel<BV, kTrace>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(Cfg::Smem::kBytes));
        cudaFuncSetAttribute(gdn_tc_scan_kernel<BV, kTrace>, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
        attrs = true;
    }
    launch_pdl_if(pdl_on(), gdn_tc_scan_kernel<BV, kTrace>,
                  dim3(static_cast<unsigned>(p.Hv), static_cast<unsigned>((p.dv + BV - 1) / BV)),
                  dim3(Cfg::kThreads), Cfg::Smem::kBytes, s, p, w, trace);
    check_launch("gated_delta_rule chunked (tensor cores) scan");
}

template <bool kTrace>
static void launch_prep(const GdnParams& p, unsigned char* w, long long* trace, cudaStream_t s) {
    static bool attrs = false;  // raise the dynamic shared-memory limit once
    if (!attrs) {
        cudaFuncSetAttribute(gdn_tc_prep_kernel<kTrace>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(PrepSmem::kBytes));
        // Without the carveout the driver left room for 2 prep blocks per SM (ncu: 47 us at T = 512, 2 waves).
        cudaFuncSetAttribute(gdn_tc_prep_kernel<kTrace>, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
        attrs = true;
    }
    gdn_tc_prep_kernel<kTrace><<<dim3(static_cast<unsigned>((p.T + C - 1) / C), static_cast<unsigned>(p.Hv)),
                                 kThreads, PrepSmem::kBytes, s>>>(p, w, trace);
    check_launch("gated_delta_rule chunked (tensor cores) prep");
}

// Prints the trace of one prep + scan pair: mean cycles per phase over blocks, the kernels' spans.
static void print_trace(const long long* d, size_t n_prep, size_t n_scan, cudaStream_t s) {
    std::vector<long long> h((n_prep + n_scan) * kTraceSlots);
    cudaMemcpyAsync(h.data(), d, h.size() * sizeof(long long), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    auto span = [&](size_t b0, size_t n) {
        long long lo = h[b0 * kTraceSlots + 8], hi = h[b0 * kTraceSlots + 9], sum = 0;
        for (size_t b = b0; b < b0 + n; ++b) {
            lo = std::min(lo, h[b * kTraceSlots + 8]);
            hi = std::max(hi, h[b * kTraceSlots + 9]);
            sum += h[b * kTraceSlots + 9] - h[b * kTraceSlots + 8];
        }
        std::fprintf(stderr, " span %.1f us, block mean %.1f us;", (hi - lo) * 1e-3, sum * 1e-3 / static_cast<double>(n));
        return lo;
    };
    std::fprintf(stderr, "gdn trace prep:");
    const long long p0 = span(0, n_prep);
    for (int k = 1; k <= 5; ++k) {
        double m = 0;
        for (size_t b = 0; b < n_prep; ++b) m += static_cast<double>(h[b * kTraceSlots + k] - h[b * kTraceSlots + k - 1]);
        std::fprintf(stderr, " p%d %.0f", k, m / static_cast<double>(n_prep));
    }
    std::fprintf(stderr, " cycles\ngdn trace scan:");
    const long long s0 = span(n_prep, n_scan);
    for (int k = 0; k <= 5; ++k) {
        double m = 0;
        for (size_t b = n_prep; b < n_prep + n_scan; ++b) m += static_cast<double>(h[b * kTraceSlots + k]);
        std::fprintf(stderr, " s%d %.0f", k, m / static_cast<double>(n_scan));
    }
    std::fprintf(stderr, " cycles (sums over chunks); scan starts %.1f us after prep\n", (s0 - p0) * 1e-3);
}

void launch_chunked_tc(const GdnParams& p, void* ws, cudaStream_t s) {
    auto* w = static_cast<unsigned char*>(ws);
    const int bv = scan_width(p.T);
    static const bool tracing = env_int("GRIMOIRE_GDN_TRACE", 0) != 0;
    if (!tracing) {
        launch_prep<false>(p, w, nullptr, s);
        if (bv == 64) launch_scan<64, false>(p, w, nullptr, s);
        else launch_scan<32, false>(p, w, nullptr, s);
        return;
    }
    // Diagnostic (direct launches only: it synchronizes to print).
    const size_t n_prep = static_cast<size_t>((p.T + C - 1) / C * p.Hv);
    const size_t n_scan = static_cast<size_t>(p.Hv * ((p.dv + bv - 1) / bv));
    static long long* trace = nullptr;
    static size_t trace_n = 0;
    if (trace_n < (n_prep + n_scan) * kTraceSlots) {
        if (trace) cudaFree(trace);
        trace_n = (n_prep + n_scan) * kTraceSlots;
        cudaMalloc(&trace, trace_n * sizeof(long long));
    }
    launch_prep<true>(p, w, trace, s);
    if (bv == 64) launch_scan<64, true>(p, w, trace + n_prep * kTraceSlots, s);
    else launch_scan<32, true>(p, w, trace + n_prep * kTraceSlots, s);
    print_trace(trace, n_prep, n_scan, s);
}

}  // namespace grimoire::cuda::gdn
