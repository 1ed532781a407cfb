// The CPU matmul's register-blocked dot product, one source for every weight format: matmul (BF16 / F16 /
// F32 weights, matmul.cpp) and the quantized matmuls (INT4 / FP8 codes widened in registers, dequant.cpp) run
// the same accumulation, so a quantized matmul gives exactly matmul's sums on its dequantized weight.
// Include from .cpp files only, inside functions compiled with GRIMOIRE_SIMD_CLONES (kernels/cpu/simd.h).
#pragma once
#include <cstdint>
#include <cstring>

// The 32-byte vector helpers are internal (always inlined), so the psABI note about passing them by value
// without AVX does not apply to any external interface.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace grimoire::cpu::dot {

typedef float v8f __attribute__((vector_size(32)));

inline v8f load8(const float* p) {
    v8f v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline float hsum(v8f v) {
    float s = 0.0f;
    for (int i = 0; i < 8; ++i) s += v[i];
    return s;
}

// acc[t][r] = x[t, :] . w_r for TT activation rows and NR weight rows, written to out[t * N + r]: eight lanes
// over k in steps of 8, summed lane by lane, then the channels past K / 8 * 8 one by one. W supplies the
// weights as fp32: W::vec(r, k) the eight of row r at channels k .. k + 7 (k a multiple of 8), W::at(r, k)
// one.
template <int TT, int NR, class W>
[[gnu::always_inline]] inline void tile(const float* x, const W& w, int64_t K, float* out, int64_t N) {
    const int64_t K8 = K / 8 * 8;
    v8f acc[TT][NR] = {};
    for (int64_t k = 0; k < K8; k += 8) {
        v8f wv[NR];
        for (int r = 0; r < NR; ++r) wv[r] = w.vec(r, k);
        for (int t = 0; t < TT; ++t) {
            const v8f xv = load8(x + t * K + k);
            for (int r = 0; r < NR; ++r) acc[t][r] += xv * wv[r];
        }
    }
    for (int t = 0; t < TT; ++t)
        for (int r = 0; r < NR; ++r) {
            float s = hsum(acc[t][r]);
            for (int64_t k = K8; k < K; ++k) s += w.at(r, k) * x[t * K + k];
            out[t * N + r] = s;
        }
}

// NR weight rows against T activation rows, four at a time.
template <int NR, class W>
[[gnu::always_inline]] inline void rows(
    const float* x, const W& w, int64_t T, int64_t K, int64_t N, float* out) {
    int64_t t0 = 0;
    for (; t0 + 4 <= T; t0 += 4) tile<4, NR>(x + t0 * K, w, K, out + t0 * N, N);
    switch (T - t0) {
        case 3:
            tile<3, NR>(x + t0 * K, w, K, out + t0 * N, N);
            break;
        case 2:
            tile<2, NR>(x + t0 * K, w, K, out + t0 * N, N);
            break;
        case 1:
            tile<1, NR>(x + t0 * K, w, K, out + t0 * N, N);
            break;
        default:
            break;
    }
}

}  // namespace grimoire::cpu::dot
