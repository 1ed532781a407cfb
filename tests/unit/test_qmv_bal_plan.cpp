// The balanced quantized-weight kernel's division of a weight among grid blocks
// (kernels/cuda/qmv_bal_plan.h), checked on the host for the properties the kernel relies on: every (n-tile,
// chunk) is computed by exactly one warp, parts are whole two-chunk scale groups, no block has more warps
// than allowed, a split n-tile lies in exactly two neighbouring blocks (one left part, one right part), and
// the block's reduction has a thread per output of its n-tiles at one row.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/qmv_bal_plan.h"

namespace grimoire {
namespace {

void check_plan(int NU, int KC, int nb, int max_warps) {
    const int E = qmv_bal::parts(1, 128, KC / 2, KC, NU, nb, max_warps);
    if (E == 0) return;
    const std::string what =
        "NU " + std::to_string(NU) + " KC " + std::to_string(KC) + " nb " + std::to_string(nb);
    const int units = NU * E;
    std::vector<int> covered(static_cast<size_t>(NU) * KC, 0);
    std::map<int, std::vector<int>>
        split_sides;  // n-tile -> side (0 left, 1 right) of each block holding a part
    for (int b = 0; b < nb; ++b) {
        const int u0 = qmv_bal::first_unit(b, units, nb), u1 = qmv_bal::first_unit(b + 1, units, nb);
        ASSERT_LE(u1 - u0, max_warps) << what << " block " << b;
        ASSERT_GE(u1 - u0, E) << what << " block " << b;
        const int ft = u0 / E, lt = (u1 - 1) / E;
        ASSERT_LE(16 * (lt - ft + 1), 32 * (u1 - u0)) << what << ": fewer threads than one row's outputs";
        for (int u = u0; u < u1; ++u) {
            const int nt = u / E, e = u - nt * E;
            const int c0 = qmv_bal::part_chunk(e, E, KC), c1 = qmv_bal::part_chunk(e + 1, E, KC);
            ASSERT_TRUE(c0 % 2 == 0 && c1 % 2 == 0 && c1 > c0) << what << " unit " << u;
            for (int c = c0; c < c1; ++c) ++covered[static_cast<size_t>(nt) * KC + c];
        }
        for (int T = ft; T <= lt; ++T) {
            const bool sp = qmv_bal::split(T, E, u0, u1);
            // Only the first and last n-tiles of a block can be split (the kernel's threads 0 and 1 arrive).
            if (sp) {
                ASSERT_TRUE(T == ft || T == lt) << what << " block " << b << " n-tile " << T;
                split_sides[T].push_back(T * E < u0 ? 1 : 0);
            }
        }
    }
    for (size_t i = 0; i < covered.size(); ++i) ASSERT_EQ(covered[i], 1) << what << " (n-tile, chunk) " << i;
    for (const auto& [T, sides] : split_sides) {
        ASSERT_EQ(sides.size(), 2u) << what << " n-tile " << T;
        EXPECT_EQ(sides[0] + sides[1], 1) << what << " n-tile " << T << ": not one left and one right part";
    }
}

TEST(QmvBalPlan, EveryChunkOnceAndSplitsInTwo) {
    for (int NU = 1; NU < 1300; NU += 13)
        for (int KC : {2, 6, 10, 34, 80, 272})
            for (int nb : {100, 132, 264})
                for (int max_warps : {12, 24}) check_plan(NU, KC, nb, max_warps);
}

// What the 27B layers get on an H200 (132 SMs, 24 warps at one row, 20 from two rows), and what is refused.
TEST(QmvBalPlan, TwentySevenBShapes) {
    EXPECT_EQ(qmv_bal::parts(1, 128, 136, 272, 320, 132, 24), 8);   // down_proj 17408 -> 5120: 20 warps
    EXPECT_EQ(qmv_bal::parts(1, 128, 48, 96, 320, 132, 24), 8);     // o_proj 6144 -> 5120
    EXPECT_EQ(qmv_bal::parts(1, 128, 40, 80, 1024, 132, 24), 3);    // DeltaNet q | k | v | z: 24 warps
    EXPECT_EQ(qmv_bal::parts(1, 128, 40, 80, 1088, 132, 24), 2);    // gate | up pairs: 17 warps
    EXPECT_EQ(qmv_bal::parts(16, 128, 136, 272, 320, 132, 20), 8);  // down at 16 rows
    EXPECT_EQ(qmv_bal::parts(1, 128, 40, 80, 15520, 132, 24), 0);   // lm_head: too many n-tiles
    EXPECT_EQ(qmv_bal::parts(1, 64, 80, 80, 320, 132, 24), 0);      // g64
    EXPECT_EQ(qmv_bal::parts(1, 128, 1, 80, 320, 132, 24), 0);      // one group (per-channel)
    EXPECT_EQ(qmv_bal::parts(17, 128, 40, 80, 320, 132, 20), 0);    // prefill rows
    EXPECT_EQ(qmv_bal::parts(1, 128, 40, 80, 100, 132, 24), 0);     // fewer units than one n-tile's per block
}

}  // namespace
}  // namespace grimoire
