// Load-time repacking of quantized weights into the tile layout the CUDA tensor-core kernels read
// (kernels/cuda/quant_mma.cuh). Plain host code, so the layout is unit-tested on machines without a GPU:
// unpacking a repacked weight must give back the canonical weight exactly.
//
// The kernels compute y = x W^T with mma.sync m16n8k16: the WEIGHT is the A operand (16 output features x 16
// input channels per tile) and the activations the B operand (16 channels x 8 tokens). A warp reads one
// 16 x 64 "chunk" (four k-tiles) with one 16-byte load per lane (INT4) or two (FP8), already in the register
// order of the A fragment:
//   lane L (g = L / 4, t = L % 4) holds, for each k-tile, the pairs a_i (i = 0..3) of row
//   r_i = g + 8 * (i & 1) at columns c_i = 2t + 8 * (i >> 1) and c_i + 1.
//   INT4: one u32 per k-tile; nibble i (bits 4i..4i+3) = W[r_i][c_i], nibble i + 4 = W[r_i][c_i + 1], so
//         (word >> 4i) & 0x000F000F is the pair a_i in the two 16-bit halves.
//   FP8:  two u32 per k-tile; word 0 bytes = (a0.x, a1.x, a0.y, a1.y), word 1 = (a2.x, a3.x, a2.y, a3.y).
// Columns here are k-slots: when the scale groups are whole chunks (quant/tile_layout.h chunk_permuted), k-slot
// s of a chunk holds channel chunk_channel(s) of that chunk, else channel s.
// Chunk tiles are stored in the order of quant/tile_layout.h ([k-chunk][n-tile]), each as [lane][words].
// Rows past N and columns past K are padding (INT4: q = 8 with zero point 8 -> 0; FP8: 0).
//
// Act-order GPTQ (g_idx not k / group_size) is handled by permuting K at load so every group is contiguous:
// the kernels gather x[perm[k']] when they stage the activations.
#pragma once
#include <cstdint>
#include <vector>

#include "quant/quantized.h"
#include "quant/tile_layout.h"

namespace grimoire {

enum class ScaleType : uint8_t { F16, BF16, F32 };

struct PackedInt4 {
    int64_t N = 0, K = 0, G = 0, group_size = 0;  // group g covers permuted channels [g*gs, (g+1)*gs)
    int64_t NT = 0, KC = 0;                       // ceil(N / 16) n-tiles, ceil(K / 64) k-chunks
    std::vector<uint32_t> words;                  // tiles (tile_layout.h) x [32][4]
    ScaleType scale_type = ScaleType::F16;        // narrowest type holding every scale exactly
    std::vector<uint8_t> scales;                  // [G][NT * 16] of scale_type (raw bytes)
    bool symmetric = true;                        // every zero point is 8: the kernel needs no zeros
    std::vector<uint8_t> zeros;                   // [G][NT * 16] u8 when !symmetric
    std::vector<int32_t> perm;                    // [K] source channel of permuted channel k', or empty
};

struct PackedFp8 {
    int64_t N = 0, K = 0, NT = 0, KC = 0;
    int tile_order = kChunkMajor;  // tile_layout.h TileOrder: chunk-major unless asked
    int64_t bn = 1, bk = 1;      // scale grid: scales[n / bn][k / bk]
    int64_t SN = 0, SG = 0;      // its shape
    std::vector<uint32_t> words;  // tiles (tile_layout.h) x [32][8]
    std::vector<float> scales;    // [SN][SG] f32
};

// Throws Error when the layout cannot be expressed (groups of unequal size after sorting, a group size not a
// multiple of 16, zero points outside 0..127).
PackedInt4 repack_int4(const Int4Host& w);
// order: the tile order (tile_layout.h TileOrder); the n-tile-major ones are what the persistent MLP block reads.
// kNtMajorPaired needs halves of whole n-tiles (N a multiple of 32), else Error.
PackedFp8 repack_fp8(const Fp8Host& w, int order = kChunkMajor);

// W[n][k] (k in the checkpoint's channel order) read back from the packed layout, as the kernel dequantizes it:
// float(q - z) * scale. Used by the tests (must equal cpu::dequant_*_rows) and by Linear::dequantize().
std::vector<float> unpack_int4(const PackedInt4& p);  // [N, K] f32
std::vector<float> unpack_fp8(const PackedFp8& p);    // [N, K] f32

float scale_value(ScaleType t, const uint8_t* base, int64_t i);

}  // namespace grimoire
