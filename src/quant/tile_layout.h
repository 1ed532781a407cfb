// Where each 16 x 64 chunk tile of a repacked quantized weight (quant/repack.h) is stored, shared by the host
// packer and the CUDA kernels: chunk-major, [k-chunk][n-tile]. The qmm kernel's grid blocks each own a run of
// chunks of one column block and advance through K at about the same pace, so at any moment they all read
// from a few narrow windows of the weight (the same chunk of neighbouring column blocks) instead of hundreds of
// separate streams; the DRAM sees the access pattern of a copy, not of a scatter.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define GRIMOIRE_HD __host__ __device__ __forceinline__
#else
#define GRIMOIRE_HD inline
#endif

namespace grimoire {

// Storage index of tile (n-tile nt, chunk c) of a weight with NT n-tiles and KC chunks.
GRIMOIRE_HD int64_t tile_index(int64_t nt, int64_t c, int64_t NT, int64_t KC) {
    (void)KC;
    return c * NT + nt;
}

// The inverse: storage index i -> (nt, c).
GRIMOIRE_HD void tile_coords(int64_t i, int64_t NT, int64_t KC, int64_t& nt, int64_t& c) {
    (void)KC;
    c = i / NT;
    nt = i - c * NT;
}

// Channel, within its 64-channel chunk, of k-slot s of a chunk tile (s = 16 kt + 8 h + 2 t + e: k-tile kt, B
// half h, thread-in-group t, element e; quant/repack.h) in a chunk-permuted weight: 16 t + 4 kt + 2 h + e. Lane
// t of the mma's B operand then holds the natural channels 16 t .. 16 t + 15 of every chunk, so the kernels
// read x in its own order with two 16-byte loads per lane and chunk (without the permutation those 16 values
// are 4-byte pairs 16 bytes apart: a prep kernel reordered x before every launch of 2..16 rows).
GRIMOIRE_HD int chunk_channel(int s) {
    return ((s >> 1) & 3) * 16 + (s >> 4) * 4 + ((s >> 3) & 1) * 2 + (s & 1);
}
// Whether a weight whose scale groups are `group` channels (`groups` of them) is chunk-permuted: when every
// group is whole chunks (or there is one group), so the permutation inside a chunk never crosses a group.
// Smaller groups (16, 32) keep the identity: their kernels apply scales per k-tile.
GRIMOIRE_HD bool chunk_permuted(int64_t group, int64_t groups) { return groups <= 1 || group % 64 == 0; }

}  // namespace grimoire
