// How the balanced quantized-weight kernel (quant_qmv_bal.cuh) divides a weight among its grid blocks: plain
// integer arithmetic shared by the kernel, its launcher and the host tests (no CUDA headers).
//
// The work is U = NU x E units (n-tile, part of K): NU n-tiles of 16 output features (a glu weight: gate / up
// n-tile pairs), each cut into E parts of whole two-chunk (128-channel) scale groups. Block b of nb takes the
// contiguous units [first_unit(b), first_unit(b + 1)), one warp each, so blocks differ by at most one unit.
// With at least E units per block an n-tile's parts fall in at most two blocks (split), whose partial sums
// the later block to arrive adds.
#pragma once
#include "quant/tile_layout.h"  // GRIMOIRE_HD

namespace grimoire::qmv_bal {

// The first unit of block b of nb over `units`.
GRIMOIRE_HD int first_unit(int b, int units, int nb) {
    return static_cast<int>(static_cast<int64_t>(b) * units / nb);
}
// The first chunk of part e of E over KC chunks (KC for e = E): whole groups of two chunks.
GRIMOIRE_HD int part_chunk(int e, int E, int KC) {
    return e >= E ? KC : (e * KC / E) & ~1;
}
// Whether n-tile T's units [T E, T E + E) extend past the block's [u0, u1).
GRIMOIRE_HD bool split(int T, int E, int u0, int u1) {
    return T * E < u0 || T * E + E > u1;
}
// The parts of K per n-tile for nb blocks of at most max_warps warps, or 0 where the weight does not take the
// balanced form: 1..16 rows, 128-channel scale groups (several), an even chunk count, at least one group per
// part and at least E units per block. The most parts (up to 8) that fit: more warps per SM hide more
// latency.
GRIMOIRE_HD int parts(int M, int group_size, int G, int KC, int NU, int nb, int max_warps) {
    if (M < 1 || M > 16 || group_size != 128 || G <= 1 || KC % 2 != 0 || NU < 1 || nb < 1) return 0;
    for (int E = 8; E >= 1; --E) {
        const int units = NU * E;
        if (KC / E >= 2 && units / nb >= E && (units + nb - 1) / nb <= max_warps) return E;
    }
    return 0;
}

}  // namespace grimoire::qmv_bal
