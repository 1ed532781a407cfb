// FP8 E4M3 encoding (core/dtype.h f32_to_fp8_e4m3) and the per-block activation quantizer of the W8A8 FP8
// prefill path (kernels/cpu/dequant.h quantize_act_fp8), the oracle the CUDA quantizer is checked against.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/dequant.h"

namespace grimoire {
namespace {

// Independent reference: the nearest of the 127 finite non-negative codes by exhaustive search, ties to the
// even code, saturating at 448.
uint8_t e4m3_by_search(float f) {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const double a = std::fabs(static_cast<double>(f));
    if (a >= 448.0) return sign | 0x7e;
    uint8_t best = 0;
    double best_err = INFINITY;
    for (int c = 0; c < 0x7f; ++c) {
        const double e = std::fabs(static_cast<double>(fp8_e4m3_to_f32(static_cast<uint8_t>(c))) - a);
        if (e < best_err || (e == best_err && (c & 1) == 0)) best = static_cast<uint8_t>(c), best_err = e;
    }
    return sign | best;
}

TEST(Fp8E4m3, EncoderMatchesExhaustiveSearch) {
    std::vector<float> probes = {0.0f,
                                 -0.0f,
                                 448.0f,
                                 -448.0f,
                                 449.0f,
                                 464.0f,
                                 1e9f,
                                 INFINITY,
                                 -INFINITY,
                                 1e-30f,
                                 -1e-30f,
                                 std::ldexp(1.0f, -10),
                                 std::ldexp(1.0f, -9),
                                 std::ldexp(3.0f, -10)};
    // Every code, every midpoint between neighbouring codes (the ties), and the floats beside both.
    for (int c = 0; c < 0x7e; ++c) {
        const float lo = fp8_e4m3_to_f32(static_cast<uint8_t>(c)),
                    hi = fp8_e4m3_to_f32(static_cast<uint8_t>(c + 1));
        const float mid = 0.5f * (lo + hi);
        for (float v :
             {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), std::nextafter(lo, 1e9f)}) {
            probes.push_back(v);
            probes.push_back(-v);
        }
    }
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> mant(1.0f, 2.0f);
    std::uniform_int_distribution<int> ex(-14, 10);
    for (int i = 0; i < 200000; ++i)
        probes.push_back(std::ldexp(mant(rng), ex(rng)) * (i & 1 ? -1.0f : 1.0f));
    int bad = 0;
    for (float v : probes) {
        const uint8_t got = f32_to_fp8_e4m3(v), want = e4m3_by_search(v);
        if (got != want && ++bad <= 5)
            ADD_FAILURE() << "f32_to_fp8_e4m3(" << v << ") = " << int(got) << ", want " << int(want);
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(f32_to_fp8_e4m3(NAN), 0x7f);
}

// Each block's scale is its amax / 448, its largest element becomes +-448, and every code is the nearest
// e4m3 value to x * (1 / s) (no neighbour code is closer), on rows with blocks of very different magnitudes, a
// block of zeros and a short last block.
TEST(Fp8ActQuant, BlocksScaleToTheirMaximumAndRoundToNearest) {
    const int64_t M = 5, K = 3 * 128 + 37, B = 128, NB = 4;
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(M * K));
    for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) {
            const int64_t b = k / B;
            const float mag = b == 0 ? 1e-3f : b == 1 ? 30.0f : b == 2 ? 1.0f : 1e4f;
            x[static_cast<size_t>(m * K + k)] = bf16_to_f32(f32_to_bf16(nd(rng) * mag));
        }
    for (int64_t k = B; k < 2 * B; ++k) x[static_cast<size_t>(2 * K + k)] = 0.0f;  // row 2, block 1: zeros
    std::vector<uint8_t> q(x.size());
    std::vector<float> s(static_cast<size_t>(M * NB));
    cpu::quantize_act_fp8(x.data(), M, K, B, q.data(), s.data());
    for (int64_t m = 0; m < M; ++m)
        for (int64_t b = 0; b < NB; ++b) {
            const int64_t k0 = b * B, k1 = std::min(K, k0 + B);
            float amax = 0;
            for (int64_t k = k0; k < k1; ++k)
                amax = std::max(amax, std::fabs(x[static_cast<size_t>(m * K + k)]));
            const float sc = s[static_cast<size_t>(m * NB + b)];
            EXPECT_EQ(sc, std::max(amax, cpu::kFp8ActMinAmax) / 448.0f) << "m " << m << " b " << b;
            bool hit_max = amax == 0;
            for (int64_t k = k0; k < k1; ++k) {
                const float xv = x[static_cast<size_t>(m * K + k)], t = xv * (1.0f / sc);
                const uint8_t c = q[static_cast<size_t>(m * K + k)];
                ASSERT_NE(c & 0x7f, 0x7f) << "NaN code at m " << m << " k " << k;
                const double err = std::fabs(static_cast<double>(fp8_e4m3_to_f32(c)) - t);
                for (int d : {-1, 1}) {
                    const int nb = (c & 0x7f) + d;
                    if (nb < 0 || nb > 0x7e) continue;
                    const double e2 = std::fabs(
                        static_cast<double>(fp8_e4m3_to_f32(static_cast<uint8_t>((c & 0x80) | nb))) - t);
                    EXPECT_LE(err, e2)
                        << "m " << m << " k " << k << " x " << xv << ": a neighbour code is closer";
                }
                if (xv != 0) {
                    EXPECT_EQ(c >> 7, xv < 0 ? 1 : 0) << "sign at m " << m << " k " << k;
                }
                if (std::fabs(xv) == amax && amax > 0) hit_max = hit_max || (c & 0x7f) == 0x7e;
            }
            EXPECT_TRUE(hit_max) << "m " << m << " b " << b << ": the block's largest element is not +-448";
        }
    for (int64_t k = B; k < 2 * B; ++k)
        EXPECT_EQ(q[static_cast<size_t>(2 * K + k)], 0) << "zero block, k " << k;
}

}  // namespace
}  // namespace grimoire
