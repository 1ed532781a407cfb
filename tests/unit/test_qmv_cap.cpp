// qmv_cap_bytes (kernels/cuda/qmv_cap.h, GRIMOIRE_QMV_CAP): the padded shared memory must leave exactly minb
// blocks resident on an SM, checked against the residency rule itself (a block costs dynamic + static +
// reserved bytes; n blocks fit while n times that is within the SM's bytes), on Hopper's numbers and odd
// ones.
#include <gtest/gtest.h>

#include <cstddef>

#include "kernels/cuda/qmv_cap.h"

namespace {

using grimoire::cuda::qmv_cap_bytes;

// How many blocks of this shared-memory footprint fit an SM (the reference: the occupancy rule for smem
// alone).
size_t resident(size_t dyn, size_t static_bytes, size_t reserved, size_t per_sm) {
    return per_sm / (dyn + static_bytes + reserved);
}

TEST(QmvCap, PaddedLaunchKeepsExactlyMinbBlocksResident) {
    const size_t hopper = 233472, reserved = 1024, max_dyn = 227 * 1024;
    for (int minb = 1; minb <= 6; ++minb)
        for (size_t smem : {size_t{0}, size_t{4096}, size_t{20000}, size_t{35 * 1024}})
            for (size_t st : {size_t{0}, size_t{16384}}) {
                const size_t got = qmv_cap_bytes(smem, st, hopper, reserved, minb, max_dyn);
                EXPECT_GE(got, smem);
                if (resident(smem, st, reserved, hopper) <= static_cast<size_t>(minb)) {
                    EXPECT_EQ(got, smem) << "already at most minb resident: no padding";
                } else {
                    EXPECT_EQ(resident(got, st, reserved, hopper), static_cast<size_t>(minb))
                        << "minb " << minb << " smem " << smem << " static " << st;
                    // The smallest such size: one byte less would admit minb + 1 blocks.
                    EXPECT_GT(resident(got - 1, st, reserved, hopper), static_cast<size_t>(minb));
                }
            }
}

TEST(QmvCap, OddSmSizesAndLimits) {
    // An SM of 100000 bytes, 3 blocks: each must exceed 25000 bytes in all.
    EXPECT_EQ(qmv_cap_bytes(1000, 500, 100000, 100, 3, 1 << 20), size_t{25001 - 600});
    EXPECT_EQ(resident(25001 - 600, 500, 100, 100000), size_t{3});
    // Padding beyond what the kernel may ask for is refused: the launch keeps its own size.
    EXPECT_EQ(qmv_cap_bytes(1000, 500, 100000, 100, 3, 10000), size_t{1000});
    // Static + reserved bytes already enough: nothing to add.
    EXPECT_EQ(qmv_cap_bytes(0, 30000, 100000, 100, 3, 1 << 20), size_t{0});
    // Degenerate inputs leave the size alone.
    EXPECT_EQ(qmv_cap_bytes(4096, 0, 0, 0, 3, 1 << 20), size_t{4096});
    EXPECT_EQ(qmv_cap_bytes(4096, 0, 233472, 1024, 0, 1 << 20), size_t{4096});
}

}  // namespace
