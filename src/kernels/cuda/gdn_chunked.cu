// Gated DeltaNet prefill in the chunked (WY) form, chunk C = 64 (models-and-formats.md §1.4 step 8), fp32 SIMT:
// the path for F32 / F16 activations and shapes the tensor-core kernels (gdn_chunk_tc.cu) do not take.
//
// Phase 1, grid (chunk, value head), independent across chunks: normalise q, k; beta, g and the in-chunk
// cumulative decay gamma; A = I + StrictLower(diag(beta) K K^T * Gamma); solve A X = [beta V | beta K e^gamma]
// by forward substitution (one column per thread) giving U and W; also P = (Q K^T) * Gamma (lower, with the
// diagonal), Qg = Q e^gamma and Kd = K e^(gamma_C - gamma). All go to the workspace.
// Phase 2, grid (value head, 32-column tile of dv), sequential over chunks: with the state tile S [dk, 32] in
// registers, V' = U - W S; O = Qg S + P V'; S = e^gamma_C S + Kd^T V'. Columns of S never mix, so tiles of one
// head run in parallel. Rows past T in the last chunk are zero (beta = g = 0), which leaves the state alone.
#include <cstdlib>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gdn_impl.h"

namespace grimoire::cuda::gdn {

namespace {
constexpr int C = kChunk;

__device__ __forceinline__ float softplus_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Copies n floats global -> shared with the whole block. The loads of a thread are independent, so unrolling
// keeps several in flight: a plain strided loop waits one L2 round trip per element (measured: that alone made
// the first version of this kernel ~5x slower than its arithmetic).
__device__ __forceinline__ void stage(float* dst, const float* __restrict__ src, int64_t n) {
    if ((n & 3) == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0 && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
        const float4* s4 = reinterpret_cast<const float4*>(src);
        float4* d4 = reinterpret_cast<float4*>(dst);
#pragma unroll 4
        for (int64_t i = threadIdx.x; i < n / 4; i += blockDim.x) d4[i] = s4[i];
    } else {
#pragma unroll 4
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    }
}

// Offsets (in floats) of one (chunk, head) record in the workspace.
struct Layout {
    int64_t dk, dv;
    __host__ __device__ int64_t W() const { return 0; }
    __host__ __device__ int64_t U() const { return C * dk; }
    __host__ __device__ int64_t P() const { return U() + C * dv; }
    __host__ __device__ int64_t Qg() const { return P() + C * C; }
    __host__ __device__ int64_t Kd() const { return Qg() + C * dk; }
    __host__ __device__ int64_t eg() const { return Kd() + C * dk; }
    __host__ __device__ int64_t size() const { return eg() + 4; }
};
}  // namespace

// Either path may run (the choice depends on dtypes, which the size query does not see): the larger record.
size_t chunked_ws_bytes(int64_t T, int64_t Hv, int64_t dk, int64_t dv) {
    const size_t simt = static_cast<size_t>((T + C - 1) / C) * static_cast<size_t>(Hv) *
                        static_cast<size_t>(Layout{dk, dv}.size()) * sizeof(float);
    const size_t tc = tc_ws_bytes(T, Hv);
    return simt > tc ? simt : tc;
}

static __global__ void __launch_bounds__(256) gdn_phase1_kernel(GdnParams p, float* ws) {
    extern __shared__ float sm[];
    const Layout lay{p.dk, p.dv};
    const int64_t c = blockIdx.x, h = blockIdx.y, kh = h / (p.Hv / p.Hk);
    const int64_t dk = p.dk, dv = p.dv, NX = dv + dk;
    const int64_t ldk = dk + 1;     // padded rows: threads reading row j of kn hit distinct banks
    float* kn = sm;                 // [C][ldk]
    float* qn = kn + C * ldk;       // [C][ldk]
    float* X = qn + C * ldk;         // [C][dv + dk]: B, then the solution
    float* A = X + C * NX;          // [C][C + 1]
    float* beta = A + C * (C + 1);  // [C]
    float* gam = beta + C;          // [C]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    float* rec = ws + (c * p.Hv + h) * lay.size();

    // Per row: beta, g; L2-normalised q (times dk^-1/2) and k. One warp per row.
    const float Aexp = expf(ld(p.A_log, p.Adt, h)), dtb = ld(p.dt_bias, p.ddt, h);
    const float qscale = rsqrtf(static_cast<float>(dk));
    for (int r = warp; r < C; r += nwarps) {
        const int64_t t = c * C + r;
        const bool ok = t < p.T;
        float qs = 0.0f, ks = 0.0f;
#pragma unroll 4
        for (int64_t i = lane; i < dk; i += 32) {
            const float qv = ok ? ld(p.q, p.qdt, t * p.qs + kh * dk + i) : 0.0f;
            const float kv = ok ? ld(p.k, p.kdt, t * p.ks + kh * dk + i) : 0.0f;
            qn[r * ldk + i] = qv;
            kn[r * ldk + i] = kv;
            qs += qv * qv;
            ks += kv * kv;
        }
        qs = warp_sum(qs);
        ks = warp_sum(ks);
        const float qi = rsqrtf(qs + 1e-6f) * qscale, ki = rsqrtf(ks + 1e-6f);
        for (int64_t i = lane; i < dk; i += 32) {
            qn[r * ldk + i] *= qi;
            kn[r * ldk + i] *= ki;
        }
        if (lane == 0) {
            beta[r] = ok ? 1.0f / (1.0f + expf(-ld(p.b, p.bdt, t * p.ab_s + h))) : 0.0f;
            gam[r] = ok ? -Aexp * softplus_(ld(p.a, p.adt, t * p.ab_s + h) + dtb) : 0.0f;
        }
    }
    __syncthreads();
    if (tid == 0)  // inclusive cumulative sum of g within the chunk
        for (int r = 1; r < C; ++r) gam[r] += gam[r - 1];
    __syncthreads();
    const float gC = gam[C - 1];

    // A (strictly lower part) and P (lower with diagonal); B = [beta V | beta K e^gamma].
    for (int e = tid; e < C * C; e += blockDim.x) {
        const int i = e / C, j = e % C;
        float dkk = 0.0f, dqk = 0.0f;
        if (j <= i) {
            for (int64_t d = 0; d < dk; ++d) {
                dkk += kn[i * ldk + d] * kn[j * ldk + d];
                dqk += qn[i * ldk + d] * kn[j * ldk + d];
            }
        }
        const float G = j <= i ? expf(gam[i] - gam[j]) : 0.0f;
        A[i * (C + 1) + j] = j < i ? beta[i] * dkk * G : 0.0f;
        rec[lay.P() + i * C + j] = dqk * G;
    }
#pragma unroll 8
    for (int e = tid; e < C * NX; e += blockDim.x) {
        const int r = static_cast<int>(e / NX);
        const int64_t col = e % NX, t = c * C + r;
        float v;
        if (col < dv) v = t < p.T ? beta[r] * ld(p.v, p.vdt, t * p.vs + h * dv + col) : 0.0f;
        else v = beta[r] * kn[r * ldk + (col - dv)] * expf(gam[r]);
        X[e] = v;
    }
    for (int e = tid; e < C * dk; e += blockDim.x) {
        const int r = static_cast<int>(e / dk);
        const int64_t d = e % dk;
        rec[lay.Qg() + e] = qn[r * ldk + d] * expf(gam[r]);
        rec[lay.Kd() + e] = kn[r * ldk + d] * expf(gC - gam[r]);
    }
    __syncthreads();
    // Forward substitution (A is unit lower triangular): X_i -= sum_{j<i} A_ij X_j, one column per thread.
    for (int64_t col = tid; col < NX; col += blockDim.x) {
        for (int i = 1; i < C; ++i) {
            float acc = X[i * NX + col];
            for (int j = 0; j < i; ++j) acc -= A[i * (C + 1) + j] * X[j * NX + col];
            X[i * NX + col] = acc;
        }
    }
    __syncthreads();
    for (int e = tid; e < C * NX; e += blockDim.x) {
        const int r = static_cast<int>(e / NX);
        const int64_t col = e % NX;
        if (col < dv) rec[lay.U() + r * dv + col] = X[e];
        else rec[lay.W() + r * dk + (col - dv)] = X[e];
    }
    if (tid == 0) rec[lay.eg()] = expf(gC);
}

namespace {
constexpr int kGroups = 4;           // warps per phase-2 block; group g owns state rows [g*rpg, (g+1)*rpg)
constexpr int kMaxRows = 128 / kGroups;
}  // namespace

static __global__ void __launch_bounds__(32 * kGroups) gdn_phase2_kernel(GdnParams p, const float* ws) {
    extern __shared__ float sm[];
    const Layout lay{p.dk, p.dv};
    const int64_t dk = p.dk, dv = p.dv, h = blockIdx.x;
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, tid = threadIdx.x;
    const int64_t j = blockIdx.y * 32 + tx;
    const bool col_ok = j < dv;
    const int rpg = static_cast<int>((dk + kGroups - 1) / kGroups);
    const int r0 = ty * rpg;
    const int nr = static_cast<int>(dk - r0 < rpg ? (dk - r0 > 0 ? dk - r0 : 0) : rpg);
    float* M = sm;                   // [C][dk]: W, then Qg, then Kd of the chunk
    float* Pm = M + C * dk;          // [C][C]
    float* Vp = Pm + C * C;          // [C][32]
    float* red = Vp + C * 32;        // [kGroups][C][32]
    float* S = p.state + h * dk * dv;

    float s[kMaxRows];
#pragma unroll
    for (int m = 0; m < kMaxRows; ++m) s[m] = (m < nr && col_ok) ? S[(r0 + m) * dv + j] : 0.0f;

    const int64_t nchunks = (p.T + C - 1) / C;
    for (int64_t c = 0; c < nchunks; ++c) {
        const float* rec = ws + (c * p.Hv + h) * lay.size();
        __syncthreads();
        stage(M, rec + lay.W(), C * dk);
        stage(Pm, rec + lay.P(), C * C);
        __syncthreads();
        // V' = U - W S
        for (int r = 0; r < C; ++r) {
            float acc = 0.0f;
#pragma unroll
            for (int m = 0; m < kMaxRows; ++m)
                if (m < nr) acc += M[r * dk + r0 + m] * s[m];
            red[(ty * C + r) * 32 + tx] = acc;
        }
        __syncthreads();
#pragma unroll 4
        for (int e = tid; e < C * 32; e += blockDim.x) {
            const int r = e / 32, jj = e % 32;
            const int64_t col = blockIdx.y * 32 + jj;
            float v = 0.0f;
            if (col < dv) {
                v = rec[lay.U() + r * dv + col];
                for (int g = 0; g < kGroups; ++g) v -= red[(g * C + r) * 32 + jj];
            }
            Vp[r * 32 + jj] = v;
        }
        __syncthreads();
        // O = Qg S + P V'
        stage(M, rec + lay.Qg(), C * dk);
        __syncthreads();
        for (int r = 0; r < C; ++r) {
            float acc = 0.0f;
#pragma unroll
            for (int m = 0; m < kMaxRows; ++m)
                if (m < nr) acc += M[r * dk + r0 + m] * s[m];
            for (int q = ty; q <= r; q += kGroups) acc += Pm[r * C + q] * Vp[q * 32 + tx];
            red[(ty * C + r) * 32 + tx] = acc;
        }
        __syncthreads();
        for (int e = tid; e < C * 32; e += blockDim.x) {
            const int r = e / 32, jj = e % 32;
            const int64_t col = blockIdx.y * 32 + jj, t = c * C + r;
            if (col < dv && t < p.T) {
                float o = 0.0f;
                for (int g = 0; g < kGroups; ++g) o += red[(g * C + r) * 32 + jj];
                st(p.out, p.odt, (t * p.Hv + h) * dv + col, o);
            }
        }
        // S = e^gamma_C S + Kd^T V'
        stage(M, rec + lay.Kd(), C * dk);
        __syncthreads();
        const float eg = rec[lay.eg()];
#pragma unroll
        for (int m = 0; m < kMaxRows; ++m) {
            if (m < nr) {
                float acc = eg * s[m];
                for (int r = 0; r < C; ++r) acc += M[r * dk + r0 + m] * Vp[r * 32 + tx];
                s[m] = acc;
            }
        }
    }
#pragma unroll
    for (int m = 0; m < kMaxRows; ++m)
        if (m < nr && col_ok) S[(r0 + m) * dv + j] = s[m];
}

// GRIMOIRE_GDN_SIMT=1 forces the fp32 SIMT kernels: the before/after comparison in one benchmark run.
bool simt_forced() {
    static const bool force_simt = [] {
        const char* e = std::getenv("GRIMOIRE_GDN_SIMT");
        return e && *e == '1';
    }();
    return force_simt;
}

void launch_chunked(const GdnParams& p, float* ws, cudaStream_t s) {
    if (!simt_forced() && tc_supported(p)) {
        launch_chunked_tc(p, ws, s);
        return;
    }
    const int64_t nchunks = (p.T + C - 1) / C;
    const size_t sm1 = static_cast<size_t>(2 * C * (p.dk + 1) + C * (p.dv + p.dk) + C * (C + 1) + 2 * C) * sizeof(float);
    const size_t sm2 = static_cast<size_t>(C * p.dk + C * C + C * 32 + kGroups * C * 32) * sizeof(float);
    static size_t set1 = 0, set2 = 0;  // raise the dynamic shared-memory limit once per size
    if (sm1 > set1) {
        cudaFuncSetAttribute(gdn_phase1_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sm1));
        set1 = sm1;
    }
    if (sm2 > set2) {
        cudaFuncSetAttribute(gdn_phase2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sm2));
        set2 = sm2;
    }
    gdn_phase1_kernel<<<dim3(static_cast<unsigned>(nchunks), static_cast<unsigned>(p.Hv)), 256, sm1, s>>>(p, ws);
    check_launch("gated_delta_rule chunked phase 1");
    gdn_phase2_kernel<<<dim3(static_cast<unsigned>(p.Hv), static_cast<unsigned>((p.dv + 31) / 32)), 32 * kGroups, sm2,
                        s>>>(p, ws);
    check_launch("gated_delta_rule chunked phase 2");
}

}  // namespace grimoire::cuda::gdn
