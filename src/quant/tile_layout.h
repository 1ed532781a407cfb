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

// Tile orders of a repacked weight.
//   kChunkMajor: [k-chunk][n-tile], the qmm kernels' order (above).
//   kNtMajor: [n-tile][k-chunk], each n-tile's 16 rows one contiguous run over all of K: the one-row persistent
//     MLP block (kernels/cuda/mlp_fp8.cu) gives each block one contiguous range of tiles, so every SM streams
//     like a copy and only the n-tiles cut by a range's ends are summed across blocks.
//   kNtMajorPaired: kNtMajor with the n-tiles of the weight's two halves interleaved (n-tile p of the first
//     half, then n-tile p of the second: physical n-tile 2 p, 2 p + 1), for a stacked [gate; up] weight whose
//     halves are whole n-tiles. The MLP block computes h = silu(g) * u for the pairs inside its range, so it
//     reads gate p and up p together: here one contiguous run, where over kNtMajor every slot of the ring was
//     two copies from two places (H100, session 30: ~4 us of a 27B layer's gate | up stream).
// Logical n-tile indices (outputs, scales) are the same in every order; only where a tile is stored differs.
enum TileOrder : int { kChunkMajor = 0, kNtMajor = 1, kNtMajorPaired = 2 };

// Where logical n-tile nt of NT (even) is stored in the paired order, and back.
GRIMOIRE_HD int64_t paired_slot(int64_t nt, int64_t NT) { return nt < NT / 2 ? 2 * nt : 2 * (nt - NT / 2) + 1; }
GRIMOIRE_HD int64_t paired_tile(int64_t slot, int64_t NT) { return (slot >> 1) + (slot & 1) * (NT / 2); }

// Storage index of tile (n-tile nt, chunk c) of a weight with NT n-tiles and KC chunks in tile order `order`.
GRIMOIRE_HD int64_t tile_index(int64_t nt, int64_t c, int64_t NT, int64_t KC, int order = kChunkMajor) {
    if (order == kChunkMajor) return c * NT + nt;
    return (order == kNtMajorPaired ? paired_slot(nt, NT) : nt) * KC + c;
}

// The inverse: storage index i -> (nt, c).
GRIMOIRE_HD void tile_coords(int64_t i, int64_t NT, int64_t KC, int64_t& nt, int64_t& c, int order = kChunkMajor) {
    if (order == kChunkMajor) {
        c = i / NT;
        nt = i - c * NT;
    } else {
        const int64_t slot = i / KC;
        c = i - slot * KC;
        nt = order == kNtMajorPaired ? paired_tile(slot, NT) : slot;
    }
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

// An FP8 chunk-permuted tile back in row order: lane (g, t) holds, of rows g and g + 8, exactly the channels
// 16 t .. 16 t + 15 of the chunk (chunk_channel), k-slot 16 kt + 8 h + 2 t + e as byte 2 e (row g) or 2 e + 1
// (row g + 8) of the lane's word 2 kt + h (quant/repack.h). So bytes 4 kt .. 4 kt + 3 of the lane's 16 bytes of
// row g (upper: row g + 8) are bytes 0, 2 (1, 3) of words w0 = 2 kt and w1 = 2 kt + 1: one byte permute.
GRIMOIRE_HD uint32_t fp8_row_word(uint32_t w0, uint32_t w1, bool upper) {
#if defined(__CUDA_ARCH__)
    return __byte_perm(w0, w1, upper ? 0x7531u : 0x6420u);
#else
    const uint32_t sh = upper ? 8u : 0u;
    return ((w0 >> sh) & 0xFFu) | (((w0 >> (16u + sh)) & 0xFFu) << 8) | (((w1 >> sh) & 0xFFu) << 16) |
           (((w1 >> (16u + sh)) & 0xFFu) << 24);
#endif
}

}  // namespace grimoire
