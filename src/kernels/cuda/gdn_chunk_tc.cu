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
// triangular inverse by forward substitution in fp32 (one column per thread), PT = P T' on tensor cores
// (hi/lo split); writes T' and PT to the workspace as hi/lo BF16 pairs plus the row scalars.
// Kernel 2 (scan), grid (value head, 32-column slice of dv), sequential over chunks: the fp32 state slice
// S [dk, 32] lives in mma accumulators (warp w owns rows 16w..16w+15); per chunk K S and Q S, T' R and PT R,
// K^T V'' run as m16n8k16 BF16 mma with every fp32 operand (S, R, T', PT, V'') split into hi + lo BF16 (q, k,
// v are exact in BF16), so the result matches fp32 arithmetic to ~2^-17 relative; the state stays fp32.
// Columns of S never mix, so the 4 slices of a head run in parallel and 2 blocks share an SM (113 KB each).
// Rows past T in the last chunk have beta = g = 0 and zero q, k, v, which leaves the state alone.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gdn_chunk_mma.cuh"
#include "kernels/cuda/gdn_impl.h"
#include "kernels/cuda/gdn_recurrence.cuh"

namespace grimoire::cuda::gdn {

namespace {
constexpr int C = kChunk;      // 64 tokens per chunk
constexpr int DK = 128;        // key head dim the tiles hold (smaller dk is zero-padded)
constexpr int BV = 32;         // state columns per scan block
constexpr int LDK = DK + 8;    // bf16 row stride of [.][DK] tiles: +16 bytes makes fragment loads conflict-free
constexpr int LDC = C + 8;     // bf16 row stride of [.][C] tiles
constexpr int LDV = BV + 8;    // bf16 row stride of the V slice
constexpr int LDF = C + 4;     // fp32 row stride of the prep kernel's [C][C] tiles (rows 16-byte aligned)
constexpr int kThreads = 256;  // 8 warps in both kernels

// One (chunk, value head) record of the workspace, in bytes: T' and PT [C][C] as hi and lo BF16 planes, then
// the row scalars cK = e^gamma rk, cQ = e^gamma rq, cD = e^(gamma_C - gamma) rk [C] f32 and e^gamma_C.
struct Rec {
    static constexpr size_t kPlane = static_cast<size_t>(C) * C * sizeof(bf16);
    static constexpr size_t kScal = 4 * kPlane;  // planes: T' hi, T' lo, PT hi, PT lo
    static constexpr size_t kBytes = kScal + 4 * C * sizeof(float);
};

// Scan kernel shared memory, in bf16 elements (offsets stay 16-byte aligned).
struct ScanSmem {
    static constexpr int kK = 0;                   // [C][LDK] raw k rows (q rows on odd chunks)
    static constexpr int kQ = kK + C * LDK;        // [C][LDK] raw q rows (k rows on odd chunks)
    static constexpr int kV = kQ + C * LDK;        // [C][LDV] raw v slice
    static constexpr int kT = kV + C * LDV;        // 4 x [C][LDC]: T' hi, T' lo, PT hi, PT lo
    static constexpr int kScal = kT + 4 * C * LDC;  // 4 * C floats (record scalars)
    static constexpr int kS = kScal + 8 * C;       // 2 x [BV][LDK]: S^T hi, lo
    static constexpr int kR = kS + 2 * BV * LDK;   // 2 x [BV][LDC]: R^T hi, lo
    static constexpr int kW = kR + 2 * BV * LDC;   // 2 x [BV][LDC]: V''^T hi, lo
    static constexpr int kEnd = kW + 2 * BV * LDC;
    static constexpr size_t kBytes = static_cast<size_t>(kEnd) * sizeof(bf16);
};
static_assert(ScanSmem::kBytes <= 116 * 1024, "two scan blocks must fit one SM");

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

static __global__ void __launch_bounds__(kThreads) gdn_tc_prep_kernel(GdnParams p, unsigned char* ws) {
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

    // Raw q, k rows of the chunk; zeros past T and past dk.
    for (int e = tid; e < 2 * C * (DK / 8); e += kThreads) {
        const int which = e / (C * (DK / 8)), r = (e / (DK / 8)) % C, col = (e % (DK / 8)) * 8;
        const int64_t t = t0 + r;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (t < p.T && col < p.dk)
            val = *reinterpret_cast<const uint4*>(bf(which ? p.q : p.k) + t * (which ? p.qs : p.ks) + kh * p.dk + col);
        *reinterpret_cast<uint4*>((which ? Qs : Ks) + r * LDK + col) = val;
    }
    __syncthreads();
    // Per row: inverse norms (q's with dk^-1/2), beta = sigmoid(b), g (zero past T). One warp per row.
    const float Aexp = expf(ld(p.A_log, p.Adt, h)), dtb = ld(p.dt_bias, p.ddt, h);
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
            const int64_t t = t0 + r;
            const bool ok = t < p.T;
            rk[r] = rsqrtf(ks + 1e-6f);
            rq[r] = rsqrtf(qs + 1e-6f) * rsqrtf(static_cast<float>(p.dk));
            beta[r] = ok ? 1.0f / (1.0f + expf(-ld(p.b, p.bdt, t * p.ab_s + h))) : 0.0f;
            gam[r] = ok ? -Aexp * softplus_(ld(p.a, p.adt, t * p.ab_s + h) + dtb) : 0.0f;
        }
    }
    __syncthreads();
    if (tid == 0) {  // inclusive cumulative sum, in the CPU twin's (sequential) order, through registers
        float g[C];
#pragma unroll
        for (int r = 0; r < C; r += 4) *reinterpret_cast<float4*>(g + r) = *reinterpret_cast<const float4*>(gam + r);
#pragma unroll
        for (int r = 1; r < C; ++r) g[r] += g[r - 1];
#pragma unroll
        for (int r = 0; r < C; r += 4) *reinterpret_cast<float4*>(gam + r) = *reinterpret_cast<const float4*>(g + r);
    }
    __syncthreads();

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

    unsigned char* rec = ws + (static_cast<size_t>(c) * p.Hv + h) * Rec::kBytes;
    bf16* planes = reinterpret_cast<bf16*>(rec);  // T' hi, T' lo, PT hi, PT lo, each [C][C]

    // T' = (I + A)^-1 diag(beta) by forward substitution, thread j owning column j in registers:
    // t_i = [i == j] - sum_{m<i} A_im t_m (A is unit-lower once I is added; rows i < j come out zero).
    if (tid < C) {
        const int j = tid;
        float t[C];
#pragma unroll
        for (int i = 0; i < C; ++i) {
            float s0 = i == j ? 1.0f : 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;  // 4 chains: latency, not FMAs
#pragma unroll
            for (int m = 0; m + 4 <= i; m += 4) {
                const float4 a4 = lds_f4(As + i * LDF + m);
                s0 -= a4.x * t[m];
                s1 -= a4.y * t[m + 1];
                s2 -= a4.z * t[m + 2];
                s3 -= a4.w * t[m + 3];
            }
#pragma unroll
            for (int m = i & ~3; m < i; ++m) s0 -= As[i * LDF + m] * t[m];
            t[i] = (s0 + s1) + (s2 + s3);
        }
        // T' = t beta_j as hi/lo: to the record row-major (coalesced over j) and here transposed, the B
        // operand of P T'.
        const float bj = beta[j];
#pragma unroll
        for (int i = 0; i < C; ++i) {
            bf16 hi, lo;
            split_bf16(t[i] * bj, hi, lo);
            planes[i * C + j] = hi;
            planes[C * C + i * C + j] = lo;
            Tth[j * LDC + i] = hi;
            Ttl[j * LDC + i] = lo;
        }
    }
    __syncthreads();

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
}

static __global__ void __launch_bounds__(kThreads, 2) gdn_tc_scan_kernel(GdnParams p, const unsigned char* ws) {
    extern __shared__ __align__(128) unsigned char smraw[];
    bf16* sm = reinterpret_cast<bf16*>(smraw);
    bf16* Ks = sm + ScanSmem::kK;
    bf16* Qs = sm + ScanSmem::kQ;
    bf16* Vs = sm + ScanSmem::kV;
    bf16* Th = sm + ScanSmem::kT;  // then T' lo, PT hi, PT lo at + C * LDC each
    bf16* Tl = Th + C * LDC;
    bf16* Ph = Tl + C * LDC;
    bf16* Pl = Ph + C * LDC;
    const float* sc = reinterpret_cast<const float*>(sm + ScanSmem::kScal);
    bf16* Sh = sm + ScanSmem::kS;
    bf16* Sl = Sh + BV * LDK;
    bf16* Rh = sm + ScanSmem::kR;
    bf16* Rl = Rh + BV * LDC;
    bf16* Wh = sm + ScanSmem::kW;
    bf16* Wl = Wh + BV * LDC;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, cc = 2 * (lane & 3);
    const int64_t h = blockIdx.x, kh = h / (p.Hv / p.Hk), col0 = static_cast<int64_t>(blockIdx.y) * BV;
    const int64_t dk = p.dk, dv = p.dv, nchunks = (p.T + C - 1) / C;
    const bf16* qg = bf(p.q);
    const bf16* kg = bf(p.k);
    const bf16* vg = bf(p.v);

    auto load_rows = [&](bf16* dst, const bf16* src, int64_t rs, int64_t c) {  // raw q or k rows of chunk c
        for (int e = tid; e < C * (DK / 8); e += kThreads) {
            const int r = e / (DK / 8), col = (e % (DK / 8)) * 8;
            const int64_t t = c * C + r;
            const bool ok = t < p.T && col < dk;
            cp_async16(dst + r * LDK + col, ok ? src + t * rs + kh * dk + col : src, ok);
        }
    };
    auto load_v = [&](int64_t c) {  // one 16-byte piece per thread: 64 rows x 4
        const int r = tid >> 2, col = (tid & 3) * 8;
        const int64_t t = c * C + r;
        const bool ok = t < p.T && col0 + col < dv;
        cp_async16(Vs + r * LDV + col, ok ? vg + t * p.vs + h * dv + col0 + col : vg, ok);
    };
    auto load_rec = [&](int64_t c) {
        const unsigned char* rec = ws + (static_cast<size_t>(c) * p.Hv + h) * Rec::kBytes;
        for (int e = tid; e < 4 * C * (C / 8); e += kThreads) {
            const int plane = e / (C * (C / 8)), r = (e / (C / 8)) % C, col = (e % (C / 8)) * 8;
            cp_async16(Th + plane * C * LDC + r * LDC + col, rec + plane * Rec::kPlane + (r * C + col) * sizeof(bf16),
                       true);
        }
        if (tid < C) cp_async16(sm + ScanSmem::kScal + tid * 8, rec + Rec::kScal + tid * 16, true);
    };

    // State rows 16 * warp .. + 15, columns col0 .. col0 + 31 as 4 accumulator tiles.
    float* Sg = p.state + h * dk * dv;
    const int d0 = 16 * warp;
    float s[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t d = d0 + g + (e >> 1) * 8, col = col0 + 8 * j + cc + (e & 1);
            s[j][e] = d < dk && col < dv ? Sg[d * dv + col] : 0.0f;
        }
    auto write_state_operand = [&]() {  // S^T [BV][DK] as hi/lo: the B operand of K S and Q S
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int off = (8 * j + cc + (e & 1)) * LDK + d0 + g + (e >> 1) * 8;
                split_bf16(s[j][e], Sh[off], Sl[off]);
            }
    };

    // The k and q tiles trade places every chunk: k of chunk c + 1 loads into the tile q of chunk c leaves
    // (after O = Q S) and lands during the state update, which still reads k of chunk c; q of chunk c + 1
    // then loads into that tile and lands during the next K S. Two commit groups per chunk: {k, v, record}
    // (waited for at the top) and {q} (waited for before Q S).
    load_rows(Ks, kg, p.ks, 0);
    load_v(0);
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
    for (int64_t c = 0; c < nchunks; ++c) {
        cp_async_wait_all_but_last();
        __syncthreads();
        const bool more = c + 1 < nchunks;
        bf16* kt = c & 1 ? Qs : Ks;  // k rows of this chunk
        bf16* qt = c & 1 ? Ks : Qs;  // q rows of this chunk

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
        cp_async_wait_all();
        __syncthreads();  // R complete, q of this chunk landed

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
        __syncthreads();  // V'' complete; q, v, T', PT and the scalars of this chunk no longer read
        if (more) {
            load_rows(qt, kg, p.ks, c + 1);
            load_v(c + 1);
            load_rec(c + 1);
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
                frag_b2(bh, Wh, LDC, 16 * jp, 16 * ks, lane);
                frag_b2(bl, Wl, LDC, 16 * jp, 16 * ks, lane);
                mma2(s[2 * jp], a, bh[0], bl[0]);
                mma2(s[2 * jp + 1], a, bh[1], bl[1]);
            }
        }
        write_state_operand();
        __syncthreads();  // k of this chunk no longer read
        if (more) {
            load_rows(kt, qg, p.qs, c + 1);
            cp_async_commit();
        }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t d = d0 + g + (e >> 1) * 8, col = col0 + 8 * j + cc + (e & 1);
            if (d < dk && col < dv) Sg[d * dv + col] = s[j][e];
        }
}

void launch_chunked_tc(const GdnParams& p, void* ws, cudaStream_t s) {
    static bool attrs = false;  // raise the dynamic shared-memory limits once
    if (!attrs) {
        cudaFuncSetAttribute(gdn_tc_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(PrepSmem::kBytes));
        cudaFuncSetAttribute(gdn_tc_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(ScanSmem::kBytes));
        cudaFuncSetAttribute(gdn_tc_scan_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
        attrs = true;
    }
    const int64_t nchunks = (p.T + C - 1) / C;
    auto* w = static_cast<unsigned char*>(ws);
    gdn_tc_prep_kernel<<<dim3(static_cast<unsigned>(nchunks), static_cast<unsigned>(p.Hv)), kThreads,
                         PrepSmem::kBytes, s>>>(p, w);
    check_launch("gated_delta_rule chunked (tensor cores) prep");
    gdn_tc_scan_kernel<<<dim3(static_cast<unsigned>(p.Hv), static_cast<unsigned>((p.dv + BV - 1) / BV)), kThreads,
                         ScanSmem::kBytes, s>>>(p, w);
    check_launch("gated_delta_rule chunked (tensor cores) scan");
}

}  // namespace grimoire::cuda::gdn
