// out [T, N] = x [T, K] @ w [N, K]^T with a BF16 / F16 / F32 weight, fp32 accumulation.
//
// Two paths, both split over N with parallel_for:
//  * T < 4 (decode): a streaming dot product per weight row. Memory-bound, so the weight row is read once
//    and converted in registers for all T activation rows.
//  * T >= 4 (prefill): a tile of kNB weight rows x kKB columns is converted to fp32 once, transposed so the
//    inner loop runs along N, and reused across every T row by a 4 x 16 register-blocked outer-product
//    kernel (no horizontal reductions, so it vectorises without -ffast-math).
// With GCC on x86-64 the two workers are also cloned for x86-64-v3 (AVX2 + FMA), picked at load time.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/threadpool.h"
#include "kernels/cpu/kernels.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define GRIMOIRE_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GRIMOIRE_SIMD_CLONES
#endif

// The 32-byte vector helpers below are internal (always inlined), so the psABI note about passing them by
// value without AVX does not apply to any external interface.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace grimoire::cpu {

namespace {

typedef float v8f __attribute__((vector_size(32)));
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef uint32_t v8u32 __attribute__((vector_size(32)));

constexpr int64_t kNB = 16;   // weight rows (output columns) per tile: two v8f
constexpr int64_t kKB = 256;  // K per tile: kNB * kKB * 4 = 16 KiB stays in L1
constexpr int64_t kTB = 4;    // activation rows per register block

inline v8f load8(const float* p) {
    v8f v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }
inline v8f bf16x8(const uint16_t* p) {
    v8u16 h;
    std::memcpy(&h, p, sizeof h);
    const v8u32 u = __builtin_convertvector(h, v8u32) << 16;
    v8f f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
inline float hsum(v8f v) {
    float s = 0.0f;
    for (int i = 0; i < 8; ++i) s += v[i];
    return s;
}

// Inline F16 -> F32 for normal numbers; the rare subnormal / inf / NaN go through the exact converter.
inline float f16(uint16_t h) {
    const uint32_t e = (h >> 10) & 0x1f;
    if (e == 0 || e == 31) return f16_to_f32(h);
    const uint32_t u = (static_cast<uint32_t>(h & 0x8000) << 16) | ((e + 112) << 23) | ((h & 0x3ffu) << 13);
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// n weight elements starting at element `off` of row `row` as fp32.
inline void row_to_f32(const void* w, DType dt, int64_t K, int64_t row, int64_t off, int64_t n, float* dst) {
    const int64_t base = row * K + off;
    if (dt == DType::F32) {
        std::memcpy(dst, static_cast<const float*>(w) + base, static_cast<size_t>(n) * 4);
    } else if (dt == DType::BF16) {
        const uint16_t* s = static_cast<const uint16_t*>(w) + base;
        for (int64_t i = 0; i < n; ++i) {
            const uint32_t u = static_cast<uint32_t>(s[i]) << 16;
            std::memcpy(dst + i, &u, 4);
        }
    } else {
        const uint16_t* s = static_cast<const uint16_t*>(w) + base;
        for (int64_t i = 0; i < n; ++i) dst[i] = f16(s[i]);
    }
}

// Decode path: rows [n0, n1) of w against TT activation rows.
template <int TT>
GRIMOIRE_SIMD_CLONES void gemv_rows(const float* x, const void* w, DType dt, int64_t K, int64_t N, int64_t n0,
                                    int64_t n1, float* out) {
    std::vector<float> wrow(dt == DType::F16 ? static_cast<size_t>(K) : 0);
    const int64_t K8 = K / 8 * 8;
    for (int64_t n = n0; n < n1; ++n) {
        const float* wf = nullptr;
        if (dt == DType::F16) {
            row_to_f32(w, dt, K, n, 0, K, wrow.data());
            wf = wrow.data();
        } else if (dt == DType::F32) {
            wf = static_cast<const float*>(w) + n * K;
        }
        const uint16_t* wb = static_cast<const uint16_t*>(w) + n * K;
        v8f acc[TT] = {};
        for (int64_t k = 0; k < K8; k += 8) {
            const v8f wv = wf ? load8(wf + k) : bf16x8(wb + k);
            for (int t = 0; t < TT; ++t) acc[t] += wv * load8(x + t * K + k);
        }
        for (int t = 0; t < TT; ++t) {
            float s = hsum(acc[t]);
            for (int64_t k = K8; k < K; ++k) s += (wf ? wf[k] : bf16_to_f32(wb[k])) * x[t * K + k];
            out[t * N + n] = s;
        }
    }
}

// Prefill path: weight row tiles [tile0, tile1) of kNB rows each, against all T rows.
GRIMOIRE_SIMD_CLONES void gemm_tiles(const float* x, const void* w, DType dt, int64_t T, int64_t K, int64_t N,
                                     int64_t tile0, int64_t tile1, float* out) {
    std::vector<float> wt(static_cast<size_t>(kKB * kNB));   // [kb, kNB] transposed fp32 weight tile
    std::vector<float> acc(static_cast<size_t>(T * kNB));    // [T, kNB] running sums of this tile
    std::vector<float> wrow(static_cast<size_t>(kKB));
    for (int64_t tile = tile0; tile < tile1; ++tile) {
        const int64_t n0 = tile * kNB, nb = std::min(kNB, N - n0);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t k0 = 0; k0 < K; k0 += kKB) {
            const int64_t kb = std::min(kKB, K - k0);
            for (int64_t j = 0; j < kNB; ++j) {
                if (j < nb) row_to_f32(w, dt, K, n0 + j, k0, kb, wrow.data());
                for (int64_t kk = 0; kk < kb; ++kk) wt[static_cast<size_t>(kk * kNB + j)] = j < nb ? wrow[static_cast<size_t>(kk)] : 0.0f;
            }
            int64_t t0 = 0;
            for (; t0 + kTB <= T; t0 += kTB) {
                v8f c[kTB][2];
                for (int r = 0; r < kTB; ++r) {
                    c[r][0] = load8(&acc[static_cast<size_t>((t0 + r) * kNB)]);
                    c[r][1] = load8(&acc[static_cast<size_t>((t0 + r) * kNB + 8)]);
                }
                const float* xb = x + t0 * K + k0;
                for (int64_t kk = 0; kk < kb; ++kk) {
                    const v8f w0 = load8(&wt[static_cast<size_t>(kk * kNB)]);
                    const v8f w1 = load8(&wt[static_cast<size_t>(kk * kNB + 8)]);
                    for (int r = 0; r < kTB; ++r) {
                        const float xv = xb[r * K + kk];
                        c[r][0] += xv * w0;
                        c[r][1] += xv * w1;
                    }
                }
                for (int r = 0; r < kTB; ++r) {
                    store8(&acc[static_cast<size_t>((t0 + r) * kNB)], c[r][0]);
                    store8(&acc[static_cast<size_t>((t0 + r) * kNB + 8)], c[r][1]);
                }
            }
            for (; t0 < T; ++t0) {  // leftover rows, one at a time
                v8f c0 = load8(&acc[static_cast<size_t>(t0 * kNB)]), c1 = load8(&acc[static_cast<size_t>(t0 * kNB + 8)]);
                const float* xb = x + t0 * K + k0;
                for (int64_t kk = 0; kk < kb; ++kk) {
                    c0 += xb[kk] * load8(&wt[static_cast<size_t>(kk * kNB)]);
                    c1 += xb[kk] * load8(&wt[static_cast<size_t>(kk * kNB + 8)]);
                }
                store8(&acc[static_cast<size_t>(t0 * kNB)], c0);
                store8(&acc[static_cast<size_t>(t0 * kNB + 8)], c1);
            }
        }
        for (int64_t t = 0; t < T; ++t)
            std::memcpy(out + t * N + n0, &acc[static_cast<size_t>(t * kNB)], static_cast<size_t>(nb) * 4);
    }
}

}  // namespace

void matmul(const float* x, const void* w, DType w_dtype, int64_t T, int64_t K, int64_t N, float* out) {
    GRIMOIRE_CHECK(w_dtype == DType::F32 || w_dtype == DType::BF16 || w_dtype == DType::F16,
                   "matmul: weight dtype must be F32, BF16 or F16");
    if (T <= 0 || N <= 0) return;
    if (T < kTB) {
        // Chunks of >= 16 rows keep the per-row overhead and the fork/join cost small.
        parallel_for(N, [&](int64_t n0, int64_t n1) {
            switch (T) {
                case 1: gemv_rows<1>(x, w, w_dtype, K, N, n0, n1, out); break;
                case 2: gemv_rows<2>(x, w, w_dtype, K, N, n0, n1, out); break;
                default: gemv_rows<3>(x, w, w_dtype, K, N, n0, n1, out); break;
            }
        }, 16);
        return;
    }
    const int64_t tiles = (N + kNB - 1) / kNB;
    parallel_for(tiles, [&](int64_t a, int64_t b) { gemm_tiles(x, w, w_dtype, T, K, N, a, b, out); });
}

}  // namespace grimoire::cpu
