// Repacking of canonical INT4 / FP8 weights into the mma.sync A-fragment tile layout (see repack.h).
#include "quant/repack.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/tile_layout.h"

namespace grimoire {

namespace {

// Row and column (within a 16 x 16 k-tile) of fragment pair i (0..3), element `second` (0 = .x, 1 = .y),
// for the lane with group id g and thread-in-group t.
inline void frag_pos(int lane, int i, int second, int& row, int& col) {
    const int g = lane >> 2, t = lane & 3;
    row = g + 8 * (i & 1);
    col = 2 * t + 8 * (i >> 1) + second;
}

// INT4 nibble j of a k-tile word: pair j & 3, element j >> 2.
inline void int4_pos(int lane, int j, int& row, int& col) { frag_pos(lane, j & 3, j >> 2, row, col); }
// FP8 byte b (0..7) of a k-tile's two words: word b / 4, byte b % 4 = (pair 2 * word + byte % 2, element byte / 2).
inline void fp8_pos(int lane, int b, int& row, int& col) {
    const int word = b >> 2, byte = b & 3;
    frag_pos(lane, 2 * word + (byte & 1), byte >> 1, row, col);
}

// Channel within the chunk of k-slot s (0..63): chunk_channel for a chunk-permuted weight (tile_layout.h).
inline int slot_channel(bool pc, int s) { return pc ? chunk_channel(s) : s; }

ScaleType narrowest(const std::vector<float>& s) {
    bool f16 = true, bf16 = true;
    for (float v : s) {
        if (f16 && f16_to_f32(f32_to_f16(v)) != v) f16 = false;
        if (bf16 && bf16_to_f32(f32_to_bf16(v)) != v) bf16 = false;
        if (!f16 && !bf16) break;
    }
    return f16 ? ScaleType::F16 : bf16 ? ScaleType::BF16 : ScaleType::F32;
}

size_t scale_size(ScaleType t) { return t == ScaleType::F32 ? 4 : 2; }

void put_scale(ScaleType t, uint8_t* base, int64_t i, float v) {
    if (t == ScaleType::F32) {
        std::memcpy(base + i * 4, &v, 4);
    } else {
        const uint16_t h = t == ScaleType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
        std::memcpy(base + i * 2, &h, 2);
    }
}

}  // namespace

float scale_value(ScaleType t, const uint8_t* base, int64_t i) {
    if (t == ScaleType::F32) {
        float v;
        std::memcpy(&v, base + i * 4, 4);
        return v;
    }
    uint16_t h;
    std::memcpy(&h, base + i * 2, 2);
    return t == ScaleType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

PackedInt4 repack_int4(const Int4Host& w) {
    PackedInt4 p;
    p.N = w.N, p.K = w.K, p.G = w.G;
    p.NT = (w.N + 15) / 16, p.KC = (w.K + 63) / 64;
    const int64_t NP = p.NT * 16;

    // Channel order: stable sort by group, so each group is one contiguous run of equal length.
    std::vector<int32_t> perm(static_cast<size_t>(w.K));
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return w.g_idx[a] < w.g_idx[b]; });
    int64_t gs = 0;
    for (int64_t k = 0; k < w.K; ++k) gs += w.g_idx[static_cast<size_t>(k)] == w.g_idx[static_cast<size_t>(perm[0])];
    if (w.G == 1) gs = w.K;
    for (int64_t k = 0; k < w.K; ++k)
        if (w.g_idx[static_cast<size_t>(perm[static_cast<size_t>(k)])] != k / gs)
            throw Error("int4 repack: groups of unequal size (group " +
                        std::to_string(w.g_idx[static_cast<size_t>(perm[static_cast<size_t>(k)])]) +
                        " at sorted channel " + std::to_string(k) + ", group size " + std::to_string(gs) +
                        "): not supported by the CUDA kernels");
    if (w.G > 1 && gs % 16 != 0)
        throw Error("int4 repack: group size " + std::to_string(gs) + " is not a multiple of 16");
    p.group_size = gs;
    bool identity = true;
    for (int64_t k = 0; k < w.K && identity; ++k) identity = perm[static_cast<size_t>(k)] == k;
    if (!identity) p.perm = perm;

    p.symmetric = std::all_of(w.zeros.begin(), w.zeros.end(), [](int32_t z) { return z == 8; });
    p.scale_type = narrowest(w.scales);
    p.scales.assign(static_cast<size_t>(w.G * NP) * scale_size(p.scale_type), 0);
    if (!p.symmetric) p.zeros.assign(static_cast<size_t>(w.G * NP), 8);
    for (int64_t g = 0; g < w.G; ++g)
        for (int64_t n = 0; n < w.N; ++n) {
            put_scale(p.scale_type, p.scales.data(), g * NP + n, w.scales[static_cast<size_t>(g * w.N + n)]);
            if (!p.symmetric) {
                const int32_t z = w.zeros[static_cast<size_t>(g * w.N + n)];
                if (z < 0 || z > 127) throw Error("int4 repack: zero point " + std::to_string(z) + " outside 0..127");
                p.zeros[static_cast<size_t>(g * NP + n)] = static_cast<uint8_t>(z);
            }
        }

    p.words.assign(static_cast<size_t>(p.NT * p.KC * 32 * 4), 0);
    const bool pc = chunk_permuted(p.group_size, p.G);
    for (int64_t nt = 0; nt < p.NT; ++nt)
        for (int64_t c = 0; c < p.KC; ++c)
            for (int lane = 0; lane < 32; ++lane)
                for (int kt = 0; kt < 4; ++kt) {
                    uint32_t word = 0;
                    for (int j = 0; j < 8; ++j) {
                        int r, col;
                        int4_pos(lane, j, r, col);
                        const int64_t n = nt * 16 + r, kp = c * 64 + slot_channel(pc, kt * 16 + col);
                        uint32_t q = 8;
                        if (n < w.N && kp < w.K) {
                            const int64_t k = p.perm.empty() ? kp : perm[static_cast<size_t>(kp)];
                            q = w.q[static_cast<size_t>(n * w.K + k)];
                        }
                        word |= (q & 15u) << (4 * j);
                    }
                    p.words[static_cast<size_t>((tile_index(nt, c, p.NT, p.KC) * 32 + lane) * 4 + kt)] = word;
                }
    return p;
}

std::vector<float> unpack_int4(const PackedInt4& p) {
    const int64_t NP = p.NT * 16;
    std::vector<float> out(static_cast<size_t>(p.N * p.K), 0.0f);
    const bool pc = chunk_permuted(p.group_size, p.G);
    for (int64_t nt = 0; nt < p.NT; ++nt)
        for (int64_t c = 0; c < p.KC; ++c)
            for (int lane = 0; lane < 32; ++lane)
                for (int kt = 0; kt < 4; ++kt) {
                    const uint32_t word = p.words[static_cast<size_t>((tile_index(nt, c, p.NT, p.KC) * 32 + lane) * 4 + kt)];
                    for (int j = 0; j < 8; ++j) {
                        int r, col;
                        int4_pos(lane, j, r, col);
                        const int64_t n = nt * 16 + r, kp = c * 64 + slot_channel(pc, kt * 16 + col);
                        if (n >= p.N || kp >= p.K) continue;
                        const int64_t g = kp / p.group_size;
                        const int z = p.symmetric ? 8 : p.zeros[static_cast<size_t>(g * NP + n)];
                        const int q = static_cast<int>((word >> (4 * j)) & 15u);
                        const int64_t k = p.perm.empty() ? kp : p.perm[static_cast<size_t>(kp)];
                        out[static_cast<size_t>(n * p.K + k)] =
                            static_cast<float>(q - z) * scale_value(p.scale_type, p.scales.data(), g * NP + n);
                    }
                }
    return out;
}

PackedFp8 repack_fp8(const Fp8Host& w, int order) {
    PackedFp8 p;
    p.N = w.N, p.K = w.K, p.bn = w.bn, p.bk = w.bk, p.tile_order = order;
    if (order != kChunkMajor && order != kNtMajor && order != kNtMajorPaired)
        throw Error("fp8 repack: unknown tile order " + std::to_string(order));
    if (order == kNtMajorPaired && w.N % 32 != 0)
        throw Error("fp8 repack: the paired tile order needs two halves of whole 16-row n-tiles (N " +
                    std::to_string(w.N) + " is not a multiple of 32)");
    p.NT = (w.N + 15) / 16, p.KC = (w.K + 63) / 64;
    p.SN = (w.N + w.bn - 1) / w.bn, p.SG = (w.K + w.bk - 1) / w.bk;
    if (p.SG > 1 && w.bk % 16 != 0)
        throw Error("fp8 repack: scale block of " + std::to_string(w.bk) + " channels is not a multiple of 16");
    p.scales = w.scales;
    p.words.assign(static_cast<size_t>(p.NT * p.KC * 32 * 8), 0);
    const bool pc = chunk_permuted(p.bk, p.SG);
    for (int64_t nt = 0; nt < p.NT; ++nt)
        for (int64_t c = 0; c < p.KC; ++c)
            for (int lane = 0; lane < 32; ++lane)
                for (int kt = 0; kt < 4; ++kt)
                    for (int half = 0; half < 2; ++half) {
                        uint32_t word = 0;
                        for (int byte = 0; byte < 4; ++byte) {
                            int r, col;
                            fp8_pos(lane, half * 4 + byte, r, col);
                            const int64_t n = nt * 16 + r, k = c * 64 + slot_channel(pc, kt * 16 + col);
                            const uint32_t v = n < w.N && k < w.K ? w.w[static_cast<size_t>(n * w.K + k)] : 0u;
                            word |= v << (8 * byte);
                        }
                        p.words[static_cast<size_t>((tile_index(nt, c, p.NT, p.KC, p.tile_order) * 32 + lane) * 8 + kt * 2 + half)] =
                            word;
                    }
    return p;
}

std::vector<float> unpack_fp8(const PackedFp8& p) {
    std::vector<float> out(static_cast<size_t>(p.N * p.K), 0.0f);
    const bool pc = chunk_permuted(p.bk, p.SG);
    for (int64_t nt = 0; nt < p.NT; ++nt)
        for (int64_t c = 0; c < p.KC; ++c)
            for (int lane = 0; lane < 32; ++lane)
                for (int kt = 0; kt < 4; ++kt)
                    for (int b = 0; b < 8; ++b) {
                        const uint32_t word =
                            p.words[static_cast<size_t>((tile_index(nt, c, p.NT, p.KC, p.tile_order) * 32 + lane) * 8 + kt * 2 + (b >> 2))];
                        int r, col;
                        fp8_pos(lane, b, r, col);
                        const int64_t n = nt * 16 + r, k = c * 64 + slot_channel(pc, kt * 16 + col);
                        if (n >= p.N || k >= p.K) continue;
                        const uint8_t v = static_cast<uint8_t>(word >> (8 * (b & 3)));
                        out[static_cast<size_t>(n * p.K + k)] =
                            fp8_e4m3_to_f32(v) * p.scales[static_cast<size_t>((n / p.bn) * p.SG + k / p.bk)];
                    }
    return out;
}

}  // namespace grimoire
