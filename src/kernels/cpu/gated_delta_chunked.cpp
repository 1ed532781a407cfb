// Gated DeltaNet, chunked form. Within a chunk of L tokens with cumulative log-decay γ (γ_i = Σ_{t≤i} g_t):
//   A   = StrictLower( β_i (k_i·k_j) e^{γ_i-γ_j} )          (L x L)
//   U   = (I + A)^-1 diag(β) V,  W = (I + A)^-1 diag(β e^γ) K  (forward substitution, A is strictly lower)
//   V'  = U - W S                                              (the part of each update S does not predict)
//   O_i = e^{γ_i} q_i S + Σ_{j<=i} (q_i·k_j) e^{γ_i-γ_j} V'_j
//   S  <- e^{γ_L} S + Σ_j e^{γ_L-γ_j} k_j V'_j^T
// which unrolls S_t = e^{g_t}(I - β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ over the chunk exactly (in real
// arithmetic). All exponents are differences γ_i - γ_j with i >= j, hence <= 0: nothing overflows.
#include "kernels/cpu/gated_delta_chunked.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threadpool.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace grimoire::cpu {

namespace {

// Per-thread scratch for one chunk of one value head.
struct ChunkWork {
    std::vector<float> q, k, gamma, beta;  // [C, dk], [C, dk], [C], [C]
    std::vector<float> U, W;               // [C, dv] then V' in place of U; [C, dk]
    ChunkWork(int64_t C, int64_t dk, int64_t dv)
        : q(static_cast<size_t>(C * dk)), k(static_cast<size_t>(C * dk)), gamma(static_cast<size_t>(C)),
          beta(static_cast<size_t>(C)), U(static_cast<size_t>(C * dv)),
          W(static_cast<size_t>(C * dk)) {}
};

// Decays e^{γ_i - γ_j} over a chunk reach e^-1000 and their products with each other go subnormal, which x86
// computes ~100x slower; values that small cannot move an fp32 sum that also holds an O(1) term (the diagonal
// j = i, e^0 = 1), so flush them to zero (FTZ + DAZ) for the duration of the kernel, then restore.
struct FlushDenormals {
#if defined(__SSE__)
    unsigned saved = _mm_getcsr();
    FlushDenormals() { _mm_setcsr(saved | 0x8040u); }  // FTZ (bit 15) | DAZ (bit 6)
    ~FlushDenormals() { _mm_setcsr(saved); }
#endif
};

// dst = src / sqrt(Σ src² + 1e-6) * mul (the kernel-internal L2 norm of q and k).
void l2_normalise(const float* src, int64_t n, float mul, float* dst) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(src[i]) * src[i];
    const float f = mul / static_cast<float>(std::sqrt(sum + 1e-6));
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * f;
}

// Eight independent partial sums so the compiler can vectorise the reduction without -ffast-math.
float dot(const float* x, const float* y, int64_t n) {
    float acc[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += x[i + j] * y[i + j];
    float sum = 0.0f;
    for (; i < n; ++i) sum += x[i] * y[i];
    for (float a : acc) sum += a;
    return sum;
}

// y += s * x over n elements.
void axpy(float s, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}

// One chunk [t0, t0 + L) of value head h (key head kh); S [dk, dv] is read, then advanced past the chunk.
void run_chunk(const float* q, const float* k, const float* v, const float* a, const float* b, float A_h,
               float dt_bias_h, const GdnShape& s, int64_t h, int64_t kh, int64_t t0, int64_t L, float* S,
               float* out, ChunkWork& w) {
    const int64_t dk = s.dk, dv = s.dv;
    const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
    float running = 0.0f;
    for (int64_t i = 0; i < L; ++i) {
        const int64_t t = t0 + i;
        l2_normalise(q + (t * s.Hk + kh) * dk, dk, qscale, &w.q[static_cast<size_t>(i * dk)]);
        l2_normalise(k + (t * s.Hk + kh) * dk, dk, 1.0f, &w.k[static_cast<size_t>(i * dk)]);
        const float x = a[t * s.Hv + h] + dt_bias_h;
        const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));  // torch's threshold 20
        running += -A_h * softplus;
        w.gamma[static_cast<size_t>(i)] = running;
        w.beta[static_cast<size_t>(i)] = 1.0f / (1.0f + std::exp(-b[t * s.Hv + h]));
    }
    const float* K = w.k.data();
    const float* Q = w.q.data();
    const float* G = w.gamma.data();
    // A, then U and W row by row (row i needs rows j < i only).
    for (int64_t i = 0; i < L; ++i) {
        float* Ui = &w.U[static_cast<size_t>(i * dv)];
        float* Wi = &w.W[static_cast<size_t>(i * dk)];
        const float bi = w.beta[static_cast<size_t>(i)];
        const float* vi = v + ((t0 + i) * s.Hv + h) * dv;
        for (int64_t c = 0; c < dv; ++c) Ui[c] = bi * vi[c];
        const float bw = bi * std::exp(G[i]);
        for (int64_t c = 0; c < dk; ++c) Wi[c] = bw * K[i * dk + c];
        for (int64_t j = 0; j < i; ++j) {
            const float Aij = bi * dot(K + i * dk, K + j * dk, dk) * std::exp(G[i] - G[j]);
            axpy(-Aij, &w.U[static_cast<size_t>(j * dv)], Ui, dv);
            axpy(-Aij, &w.W[static_cast<size_t>(j * dk)], Wi, dk);
        }
    }
    // V' = U - W S (in place in U), and O = e^γ Q S + causal (Q Kᵀ ⊙ Γ) V', both against the incoming S.
    for (int64_t i = 0; i < L; ++i) {
        float* Vi = &w.U[static_cast<size_t>(i * dv)];
        float* Oi = out + ((t0 + i) * s.Hv + h) * dv;
        for (int64_t c = 0; c < dv; ++c) Oi[c] = 0.0f;
        const float eg = std::exp(G[i]);
        for (int64_t r = 0; r < dk; ++r) {
            axpy(-w.W[static_cast<size_t>(i * dk + r)], S + r * dv, Vi, dv);
            axpy(eg * Q[i * dk + r], S + r * dv, Oi, dv);
        }
        for (int64_t j = 0; j <= i; ++j)
            axpy(dot(Q + i * dk, K + j * dk, dk) * std::exp(G[i] - G[j]), &w.U[static_cast<size_t>(j * dv)], Oi, dv);
    }
    // S <- e^{γ_L} S + Σ_j e^{γ_L - γ_j} k_j V'_jᵀ
    const float gl = G[L - 1], el = std::exp(gl);
    for (int64_t r = 0; r < dk * dv; ++r) S[r] *= el;
    for (int64_t j = 0; j < L; ++j) {
        const float dj = std::exp(gl - G[j]);
        const float* Vj = &w.U[static_cast<size_t>(j * dv)];
        for (int64_t r = 0; r < dk; ++r) axpy(dj * K[j * dk + r], Vj, S + r * dv, dv);
    }
}

}  // namespace

void gated_delta_chunked(const float* q, const float* k, const float* v, const float* a, const float* b,
                         const float* A_log, const float* dt_bias, float* state, const GdnShape& s, float* out,
                         int64_t chunk) {
    GRIMOIRE_CHECK(s.Hk > 0 && s.Hv % s.Hk == 0, "gated_delta_chunked: Hv must be a multiple of Hk");
    GRIMOIRE_CHECK(chunk > 0, "gated_delta_chunked: chunk must be positive");
    const int64_t group = s.Hv / s.Hk;
    parallel_for(s.Hv, [&](int64_t h0, int64_t h1) {
        [[maybe_unused]] FlushDenormals ftz;  // an empty type where there is no SSE
        ChunkWork w(chunk, s.dk, s.dv);
        for (int64_t h = h0; h < h1; ++h) {
            float* S = state + h * s.dk * s.dv;
            const float A_h = std::exp(A_log[h]);
            for (int64_t t0 = 0; t0 < s.T; t0 += chunk)
                run_chunk(q, k, v, a, b, A_h, dt_bias[h], s, h, h / group, t0, std::min(chunk, s.T - t0), S, out,
                          w);
        }
    });
}

}  // namespace grimoire::cpu
