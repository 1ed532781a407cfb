// CPU dequantization and matmul for quantized weights: the exact reference (oracle) every other kernel is
// checked against. Weights come in one canonical, already unpacked layout per family; the format readers in
// src/quant/ turn each checkpoint packing (GPTQ, AWQ, compressed-tensors, FP8) into it at load time.
#pragma once
#include <cstdint>
#include <vector>

namespace grimoire::cpu {

// Group-quantized INT4: W[n, k] = float(q[n, k] - zeros[g_idx[k], n]) * scales[g_idx[k], n].
// (q - z) is a small integer, so the product is exact in fp32: the same expression in numpy is bit-identical.
// The codes are kept two to a byte (half the memory and the bytes a decode step streams of one per byte), in
// blocks of 32 channels of 16 bytes: channel k of row n is in byte n * int4_row_bytes(K) + k / 32 * 16 + k % 16,
// the low nibble for k % 32 < 16, the high one else (so a block unpacks by two plain byte loops, which
// vectorize; a row ends padded to a whole block).
struct Int4Weights {
    const uint8_t* q = nullptr;       // [N, int4_row_bytes(K)] u8, two codes 0..15 a byte (pack_int4)
    const int32_t* zeros = nullptr;   // [G, N] i32, the real zero point (format offsets already applied)
    const float* scales = nullptr;    // [G, N] f32 (from the stored fp16/bf16, exact)
    const int32_t* g_idx = nullptr;   // [K] i32, each in [0, G)
    int64_t N = 0, K = 0, G = 0;
};

constexpr int64_t int4_row_bytes(int64_t K) { return (K + 31) / 32 * 16; }
// codes [N, K] u8 (each 0..15) -> [N, int4_row_bytes(K)] u8, Int4Weights::q's layout (the padding zero).
std::vector<uint8_t> pack_int4(const uint8_t* codes, int64_t N, int64_t K);

// FP8 E4M3 with a scale grid: W[n, k] = fp8(w[n, k]) * scales[n / bn, k / bk] (a multiplier).
// Block-scaled: bn = bk = 128; per-channel: bn = 1, bk = K; per-tensor: bn = N, bk = K.
struct Fp8Weights {
    const uint8_t* w = nullptr;       // [N, K] e4m3
    const float* scales = nullptr;    // [ceil(N / bn), ceil(K / bk)] f32
    int64_t N = 0, K = 0, bn = 1, bk = 1;
};

// Rows n0..n1-1 of W as fp32.
void dequant_int4_rows(const Int4Weights& w, int64_t n0, int64_t n1, float* out);  // out [n1-n0, K] f32
void dequant_fp8_rows(const Fp8Weights& w, int64_t n0, int64_t n1, float* out);    // out [n1-n0, K] f32

// out [T, N] = x [T, K] @ W^T with W dequantized a tile of rows at a time to fp32 (fp32 accumulation);
// multi-threaded over N.
void matmul_int4(const float* x, const Int4Weights& w, int64_t T, float* out);  // x [T, K], out [T, N] f32
void matmul_fp8(const float* x, const Fp8Weights& w, int64_t T, float* out);    // x [T, K], out [T, N] f32

// The activation side of the W8A8 FP8 block GEMM (the CUDA FP8 prefill path, and what HF transformers'
// FP8Linear does before its block-scaled matmul): each row of x is cut into blocks of `block` channels, and each
// block gets s = max(amax, kFp8ActMinAmax) / 448 and q = e4m3(x * (1 / s)) (IEEE fp32 division and reciprocal,
// round to nearest even, saturating). The floor on amax keeps an all-zero block at zero codes where 0 / 0 would
// give NaN. The reciprocal is vLLM's per-token-group quantizer's form (one multiply per channel); x / s
// differs from it only where the quotient lies within an fp32 ulp or two of a code midpoint.
// x [M, K] f32; q [M, K] e4m3; scales [M, ceil(K / block)] f32, a multiplier (x ~= e4m3(q) * s).
constexpr float kFp8ActMinAmax = 1e-10f;
void quantize_act_fp8(const float* x, int64_t M, int64_t K, int64_t block, uint8_t* q, float* scales);

}  // namespace grimoire::cpu
