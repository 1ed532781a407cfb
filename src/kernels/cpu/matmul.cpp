// out [T, N] = x [T, K] @ w [N, K]^T with a BF16 / F16 / F32 weight, fp32 accumulation.
//
// Register-blocked dot products: two weight rows against groups of four activation rows (8 vector
// accumulators), split over N with parallel_for. The two weight rows stay in L1 while every activation row
// of the block uses them, so the weights stream from memory once per block of kDotMaxT rows; with T > 4 a
// BF16/F16 row pair is first widened to fp32 in an L1 buffer (converted once, reused by every row group),
// with T <= 4 (decode) it is widened in registers. The vector-extension accumulators need no -ffast-math.
// (A transposed-tile outer-product kernel was slower here: its strided conversion costs more than it saves;
// see the CPU section of docs/BENCHMARKS.md.)
// With GCC on x86-64 the worker is also cloned for x86-64-v3 (AVX2 + FMA), picked at load time.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/threadpool.h"
#include "kernels/cpu/dot_tile.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/simd.h"

namespace grimoire::cpu {

namespace {

using dot::load8;
using dot::v8f;
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef uint32_t v8u32 __attribute__((vector_size(32)));

// Activation rows per pass over the weights: 64 * K * 4 bytes of x (512 KiB at K = 2048) stays in L2
// (best of 4..64 on a Xeon with 2 MiB L2 per core, docs/BENCHMARKS.md).
// Overridable at compile time for tuning runs of bench/bench_cpu_matmul.cpp.
#ifndef GRIMOIRE_MATMUL_TBLOCK
#define GRIMOIRE_MATMUL_TBLOCK 64
#endif
constexpr int64_t kDotMaxT = GRIMOIRE_MATMUL_TBLOCK;

inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }
inline v8f bf16x8(const uint16_t* p) {
    v8u16 h;
    std::memcpy(&h, p, sizeof h);
    const v8u32 u = __builtin_convertvector(h, v8u32) << 16;
    v8f f;
    std::memcpy(&f, &u, sizeof f);
    return f;
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

// Weight rows for dot::tile: NR consecutive rows of K, BF16 (widened in registers) or fp32.
struct Bf16Rows {
    const uint16_t* w;
    int64_t K;
    [[gnu::always_inline]] v8f vec(int r, int64_t k) const { return bf16x8(w + r * K + k); }
    [[gnu::always_inline]] float at(int r, int64_t k) const { return bf16_to_f32(w[r * K + k]); }
};
struct F32Rows {
    const float* w;
    int64_t K;
    [[gnu::always_inline]] v8f vec(int r, int64_t k) const { return load8(w + r * K + k); }
    [[gnu::always_inline]] float at(int r, int64_t k) const { return w[r * K + k]; }
};

template <int NR>
[[gnu::always_inline]] inline void dot_rows_t(bool bf, const float* x, const void* w, int64_t T, int64_t K, int64_t N,
                                              float* out) {
    if (bf) dot::rows<NR>(x, Bf16Rows{static_cast<const uint16_t*>(w), K}, T, K, N, out);
    else dot::rows<NR>(x, F32Rows{static_cast<const float*>(w), K}, T, K, N, out);
}

// Weight rows [n0, n1), two at a time, against every activation row in groups of 4.
GRIMOIRE_SIMD_CLONES void dot_rows(const float* x, const void* w, DType dt, int64_t T, int64_t K, int64_t N,
                                   int64_t n0, int64_t n1, float* out) {
    std::vector<float> wrows(dt != DType::F32 ? static_cast<size_t>(2 * K) : 0);
    const size_t es = dtype_size(dt);
    for (int64_t n = n0; n < n1; n += 2) {
        const int nr = n + 1 < n1 ? 2 : 1;
        const void* wp = static_cast<const uint8_t*>(w) + static_cast<size_t>(n * K) * es;
        bool bf = dt == DType::BF16;
        if (dt == DType::F16 || (bf && T > 4)) {  // widen once, reuse for every group of 4 rows
            bf = false;
            for (int r = 0; r < nr; ++r) row_to_f32(w, dt, K, n + r, 0, K, wrows.data() + r * K);
            wp = wrows.data();
        }
        if (nr == 2) dot_rows_t<2>(bf, x, wp, T, K, N, out + n);
        else dot_rows_t<1>(bf, x, wp, T, K, N, out + n);
    }
}

}  // namespace

void matmul_rows_f32(const float* x, const float* w, int64_t T, int64_t K, int64_t N, int64_t rows, float* out) {
    dot_rows(x, w, DType::F32, T, K, N, 0, rows, out);
}

void matmul(const float* x, const void* w, DType w_dtype, int64_t T, int64_t K, int64_t N, float* out) {
    GRIMOIRE_CHECK(w_dtype == DType::F32 || w_dtype == DType::BF16 || w_dtype == DType::F16,
                   "matmul: weight dtype must be F32, BF16 or F16");
    if (T <= 0 || N <= 0) return;
    // Blocks of kDotMaxT activation rows keep x's block (kDotMaxT * K * 4 bytes) in L2 while every weight row
    // streams past it once per block.
    for (int64_t t0 = 0; t0 < T; t0 += kDotMaxT) {
        const int64_t tb = std::min(kDotMaxT, T - t0);
        // Each chunk gets >= 2^17 multiply-adds: waking a worker costs microseconds (far more on an
        // oversubscribed machine), so the small matmuls of a small model stay on the calling thread.
        const int64_t grain = std::max<int64_t>(16, (int64_t{1} << 17) / std::max<int64_t>(1, K * tb));
        parallel_for(N, [&](int64_t n0, int64_t n1) {
            dot_rows(x + t0 * K, w, w_dtype, tb, K, N, n0, n1, out + t0 * N);
        }, grain);
    }
}

}  // namespace grimoire::cpu
