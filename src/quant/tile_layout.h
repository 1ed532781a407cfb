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

}  // namespace grimoire
