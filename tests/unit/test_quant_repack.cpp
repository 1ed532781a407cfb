// The load-time repacking into the CUDA kernels' tile layout (quant/repack.h), checked on the CPU: unpacking a
// repacked weight must give back exactly what the CPU oracle dequantizes from the canonical weight, for odd
// shapes (N, K not multiples of the 16 x 64 tiles), every group size, act-order permutations, symmetric and
// asymmetric zero points and each scale dtype. The GPU tests then only need to trust the same layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/dequant.h"
#include "quant/repack.h"
#include "quant/tile_layout.h"

namespace grimoire {
namespace {

Int4Host random_int4(int64_t N, int64_t K, int64_t gs, bool act_order, bool sym, ScaleType st, uint32_t seed) {
    std::mt19937 rng(seed);
    Int4Host h;
    h.N = N, h.K = K, h.G = gs > 0 ? (K + gs - 1) / gs : 1;
    const int64_t group = gs > 0 ? gs : K;
    h.q.resize(static_cast<size_t>(N * K));
    for (auto& v : h.q) v = static_cast<uint8_t>(rng() & 15);
    h.zeros.resize(static_cast<size_t>(h.G * N));
    for (auto& z : h.zeros) z = sym ? 8 : static_cast<int32_t>(rng() % 17);  // v1 zeros reach 16
    h.scales.resize(static_cast<size_t>(h.G * N));
    // BF16 scales below fp16's normal range (6e-5) are not fp16-exact, so the BF16 layout is exercised.
    std::uniform_real_distribution<float> d(st == ScaleType::BF16 ? 1e-7f : 1e-4f, st == ScaleType::BF16 ? 5e-6f : 3e-2f);
    for (auto& s : h.scales) {
        const float v = d(rng);
        s = st == ScaleType::F16 ? f16_to_f32(f32_to_f16(v)) : st == ScaleType::BF16 ? bf16_to_f32(f32_to_bf16(v)) : v;
    }
    // GPTQ act-order: g_idx[k] = (position of k in a random order) / group.
    std::vector<int32_t> order(static_cast<size_t>(K));
    std::iota(order.begin(), order.end(), 0);
    if (act_order) std::shuffle(order.begin(), order.end(), rng);
    h.g_idx.resize(static_cast<size_t>(K));
    for (int64_t i = 0; i < K; ++i) h.g_idx[static_cast<size_t>(order[static_cast<size_t>(i)])] = static_cast<int32_t>(i / group);
    return h;
}

std::vector<float> oracle_int4(const Int4Host& h) {
    std::vector<float> out(static_cast<size_t>(h.N * h.K));
    cpu::dequant_int4_rows({cpu::pack_int4(h.q.data(), h.N, h.K).data(), h.zeros.data(), h.scales.data(), h.g_idx.data(), h.N, h.K, h.G}, 0, h.N,
                           out.data());
    return out;
}

struct Int4Case {
    int64_t N, K, gs;
    bool act_order, sym;
    ScaleType st;
};

class Repack4 : public ::testing::TestWithParam<Int4Case> {};

TEST_P(Repack4, UnpackEqualsOracleExactly) {
    const Int4Case c = GetParam();
    const Int4Host h = random_int4(c.N, c.K, c.gs, c.act_order, c.sym, c.st, static_cast<uint32_t>(c.N * 31 + c.K));
    const PackedInt4 p = repack_int4(h);
    EXPECT_EQ(p.symmetric, c.sym);
    EXPECT_EQ(p.scale_type, c.st);
    EXPECT_EQ(p.perm.empty(), !c.act_order);
    EXPECT_EQ(p.words.size(), static_cast<size_t>(((c.N + 15) / 16) * ((c.K + 63) / 64) * 128));
    const std::vector<float> want = oracle_int4(h), got = unpack_int4(p);
    ASSERT_EQ(got.size(), want.size());
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
    EXPECT_EQ(bad, 0u) << "of " << got.size();
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Repack4,
    ::testing::Values(Int4Case{16, 64, 64, false, true, ScaleType::F16}, Int4Case{17, 200, 32, false, false, ScaleType::F16},
                      Int4Case{40, 384, 128, true, true, ScaleType::BF16}, Int4Case{33, 1000, 0, false, false, ScaleType::F32},
                      Int4Case{65, 320, 64, true, false, ScaleType::F16}, Int4Case{3, 96, 32, true, true, ScaleType::F32},
                      Int4Case{130, 1024, 128, false, false, ScaleType::BF16}));

// Whole-chunk groups (and one group) store each chunk permuted so that lane t of the mma holds the natural
// channels 16t .. 16t + 15 (quant/tile_layout.h chunk_channel); groups of 16 / 32 keep the identity, where lane t
// holds channels 2t, 2t + 1 of every 8. q encodes the channel so every nibble names the lane that must hold it.
TEST(Repack4, ChunkPermutationPutsSixteenConsecutiveChannelsInEachLane) {
    std::vector<int> seen(64, 0);
    for (int slot = 0; slot < 64; ++slot) {
        const int ch = chunk_channel(slot);
        ASSERT_GE(ch, 0);
        ASSERT_LT(ch, 64);
        ++seen[static_cast<size_t>(ch)];
        EXPECT_EQ(ch / 16, (slot >> 1) & 3) << "slot " << slot;  // thread-in-group t of the B fragment
    }
    for (int n : seen) EXPECT_EQ(n, 1);  // a bijection
    EXPECT_TRUE(chunk_permuted(128, 40));
    EXPECT_TRUE(chunk_permuted(1000, 1));
    EXPECT_FALSE(chunk_permuted(32, 4));
    for (const int64_t gs : {128, 32}) {
        Int4Host h = random_int4(16, 256, gs, false, true, ScaleType::F16, 3);
        for (int64_t n = 0; n < h.N; ++n)
            for (int64_t k = 0; k < h.K; ++k)
                h.q[static_cast<size_t>(n * h.K + k)] =
                    static_cast<uint8_t>(gs == 128 ? (k % 64) / 16 : ((k % 16) / 2) % 4);
        const PackedInt4 p = repack_int4(h);
        for (int64_t c = 0; c < p.KC; ++c)
            for (int lane = 0; lane < 32; ++lane)
                for (int kt = 0; kt < 4; ++kt) {
                    const uint32_t w = p.words[static_cast<size_t>((tile_index(0, c, p.NT, p.KC) * 32 + lane) * 4 + kt)];
                    for (int j = 0; j < 8; ++j)
                        ASSERT_EQ((w >> (4 * j)) & 15u, static_cast<uint32_t>(lane & 3))
                            << "g" << gs << " chunk " << c << " lane " << lane << " k-tile " << kt << " nibble " << j;
                }
    }
}

TEST(Repack4, UnequalGroupsAreRefused) {
    Int4Host h = random_int4(16, 128, 32, false, true, ScaleType::F16, 1);
    h.g_idx[0] = 1;  // group 0 now has 31 channels, group 1 has 33
    EXPECT_THROW(repack_int4(h), Error);
}

TEST(Repack4, GroupsNotMultipleOf16AreRefused) {
    const Int4Host h = random_int4(16, 120, 24, false, true, ScaleType::F16, 2);
    EXPECT_THROW(repack_int4(h), Error);
}

struct Fp8Case {
    int64_t N, K, bn, bk;
};
class RepackFp8 : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(RepackFp8, UnpackEqualsOracleExactly) {
    const Fp8Case c = GetParam();
    std::mt19937 rng(static_cast<uint32_t>(c.N + 7 * c.K));
    Fp8Host h;
    h.N = c.N, h.K = c.K, h.bn = c.bn, h.bk = c.bk;
    h.w.resize(static_cast<size_t>(c.N * c.K));
    for (auto& v : h.w) {
        v = static_cast<uint8_t>(rng());
        if ((v & 0x7F) == 0x7F) v ^= 1;  // no NaN encodings
    }
    h.scales.resize(static_cast<size_t>(((c.N + c.bn - 1) / c.bn) * ((c.K + c.bk - 1) / c.bk)));
    std::uniform_real_distribution<float> d(1e-3f, 1.0f);
    for (auto& s : h.scales) s = d(rng);
    std::vector<float> want(static_cast<size_t>(c.N * c.K));
    cpu::dequant_fp8_rows({h.w.data(), h.scales.data(), h.N, h.K, h.bn, h.bk}, 0, h.N, want.data());
    const PackedFp8 p = repack_fp8(h);
    std::vector<int> orders = {kNtMajor};
    if (c.N % 32 == 0)
        orders.push_back(kNtMajorPaired);
    else
        EXPECT_THROW(repack_fp8(h, kNtMajorPaired), Error);  // the halves are not whole n-tiles
    for (const int order : {kChunkMajor, kNtMajor, kNtMajorPaired}) {
        if (order != kChunkMajor && std::find(orders.begin(), orders.end(), order) == orders.end()) continue;
        const PackedFp8 q = order == kChunkMajor ? p : repack_fp8(h, order);
        ASSERT_EQ(q.tile_order, order);
        const std::vector<float> got = unpack_fp8(q);
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
        EXPECT_EQ(bad, 0u) << "of " << got.size() << ", tile order " << order;
        // Every order holds the same tiles: tile (nt, c) of one is tile (nt, c) of the chunk-major one. The
        // n-tile-major ones store an n-tile's chunks contiguously; the paired one puts n-tile p of the first half
        // and n-tile p of the second side by side.
        ASSERT_EQ(p.words.size(), q.words.size());
        size_t moved = 0, misplaced = 0, coords = 0;
        for (int64_t nt = 0; nt < p.NT; ++nt)
            for (int64_t cc = 0; cc < p.KC; ++cc) {
                const int64_t i = tile_index(nt, cc, p.NT, p.KC), j = tile_index(nt, cc, q.NT, q.KC, order);
                const int64_t slot = order == kNtMajorPaired ? (nt < p.NT / 2 ? 2 * nt : 2 * (nt - p.NT / 2) + 1) : nt;
                if (order != kChunkMajor) misplaced += j != slot * p.KC + cc;
                moved += std::memcmp(&p.words[static_cast<size_t>(i * 256)], &q.words[static_cast<size_t>(j * 256)],
                                     1024) != 0;
                int64_t bn = -1, bc = -1;
                tile_coords(j, q.NT, q.KC, bn, bc, order);
                coords += bn != nt || bc != cc;
            }
        EXPECT_EQ(moved, 0u) << "tile order " << order;
        EXPECT_EQ(misplaced, 0u) << "tile order " << order;
        EXPECT_EQ(coords, 0u) << "tile_coords is not tile_index's inverse, tile order " << order;
        if (order == kNtMajorPaired) {
            for (int64_t pr = 0; pr < p.NT / 2; ++pr) {
                EXPECT_EQ(tile_index(pr + p.NT / 2, 0, p.NT, p.KC, order), tile_index(pr, 0, p.NT, p.KC, order) + p.KC);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RepackFp8,
                         ::testing::Values(Fp8Case{16, 64, 128, 128}, Fp8Case{300, 260, 128, 128},
                                           Fp8Case{17, 1000, 1, 1000}, Fp8Case{50, 77, 50, 77},
                                           Fp8Case{96, 260, 32, 128},     // paired: scale rows of two n-tiles
                                           Fp8Case{320, 130, 128, 128})); // paired: gate | up of I = 160

// The W8A8 prefill's unpack (kernels/cuda quant_dequant.cuh unpack_fp8_chunk) reads a chunk-permuted FP8 tile back
// in row order through tile_layout.h fp8_row_word: lane (g, t)'s 16 bytes of rows g and g + 8 must be the
// checkpoint's codes of channels c * 64 + 16 t .. + 15, for every chunk of a weight with partial tiles.
TEST(RepackFp8, RowWordsGiveTheCheckpointCodes) {
    std::mt19937 rng(5);
    Fp8Host h;
    h.N = 40, h.K = 384, h.bn = 128, h.bk = 128;
    h.w.resize(static_cast<size_t>(h.N * h.K));
    for (auto& v : h.w) v = static_cast<uint8_t>(rng() % 0x7F | (rng() & 0x80));
    h.scales.assign(static_cast<size_t>(1 * 3), 1.0f);
    const PackedFp8 p = repack_fp8(h);
    ASSERT_TRUE(chunk_permuted(p.bk, p.SG));
    size_t bad = 0, checked = 0;
    for (int64_t nt = 0; nt < p.NT; ++nt)
        for (int64_t c = 0; c < p.KC; ++c)
            for (int lane = 0; lane < 32; ++lane) {
                const uint32_t* w = p.words.data() + (tile_index(nt, c, p.NT, p.KC) * 32 + lane) * 8;
                const int g = lane >> 2, t = lane & 3;
                for (int upper = 0; upper < 2; ++upper) {
                    const int64_t n = nt * 16 + g + 8 * upper;
                    if (n >= h.N) continue;
                    for (int kt = 0; kt < 4; ++kt) {
                        const uint32_t word = fp8_row_word(w[2 * kt], w[2 * kt + 1], upper != 0);
                        for (int b = 0; b < 4; ++b) {
                            const int64_t k = c * 64 + 16 * t + 4 * kt + b;
                            bad += static_cast<uint8_t>(word >> (8 * b)) != h.w[static_cast<size_t>(n * h.K + k)];
                            ++checked;
                        }
                    }
                }
            }
    EXPECT_EQ(bad, 0u) << "of " << checked;
    EXPECT_EQ(checked, h.w.size());
}

}  // namespace
}  // namespace grimoire
