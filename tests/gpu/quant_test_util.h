// Shared by the quantized-weight GPU tests: a fresh seed per run (printed, so a failure can be replayed) and
// random FP8 weights in the canonical host form.
#pragma once
#include <cstdint>
#include <cstdio>
#include <random>

#include "quant/quantized.h"

namespace grimoire {

inline uint32_t fresh_seed() {
    const uint32_t s = std::random_device{}();
    std::printf("seed %u\n", s);
    return s;
}

// Random E4M3 codes (no NaN codes) with 128 x 128-block (block) or per-channel scales in [1e-3, 2e-2).
inline Fp8Host random_fp8(int64_t N, int64_t K, bool block, std::mt19937& rng) {
    Fp8Host h;
    h.N = N, h.K = K, h.bn = block ? 128 : 1, h.bk = block ? 128 : K;
    h.w.resize(static_cast<size_t>(N * K));
    for (auto& v : h.w) {
        v = static_cast<uint8_t>(rng());
        if ((v & 0x7F) == 0x7F) v ^= 1;
    }
    h.scales.resize(static_cast<size_t>(((N + h.bn - 1) / h.bn) * ((K + h.bk - 1) / h.bk)));
    std::uniform_real_distribution<float> d(1e-3f, 2e-2f);
    for (auto& s : h.scales) s = d(rng);
    return h;
}

}  // namespace grimoire
