// CUDA entry points for quantized weights (INT4 group-quantized, FP8 E4M3 block/channel-scaled), over the
// device copies of the tile layout built by quant/repack.h.
//   qmm_*:     y [M, N] = x [M, K] @ W^T for M = 1..16 on tensor cores (mma.sync m16n8k16, BF16 activations,
//              fp32 accumulation), stream-K over one wave of blocks with a deterministic in-kernel reduction
//              (decode, verify); 1..4 rows mostly take a kernel whose blocks each cover all of K for one or two
//              16-feature tiles (quant_qmv.cuh, no cross-block reduction). Both are deterministic.
//   dequant_*: W as a dense BF16 [N, K] matrix for the prefill path (then a cuBLAS GEMM); F32 for the F32
//              reference mode, which runs every M through it.
// Every launch is on the given stream and none synchronises (graph-capturable).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor.h"

namespace grimoire::cuda {

constexpr int kQmmMaxM = 16;

// Device views of a repacked weight. Scales of an INT4 weight are [G][NT*16] in `scale_dtype` (F16, BF16 or
// F32); zeros [G][NT*16] u8 or null (symmetric: every zero point is 8); perm [K] or null (act-order).
struct Int4Dev {
    const uint32_t* words = nullptr;  // tiles (quant/tile_layout.h) x [32][4]
    const void* scales = nullptr;
    DType scale_dtype = DType::F16;
    const uint8_t* zeros = nullptr;
    const int32_t* perm = nullptr;
    int64_t N = 0, K = 0, G = 0, group_size = 0, NT = 0, KC = 0;
};

// FP8: scales f32 [SN][SG], W[n][k] = fp8(w) * scales[n / bn][k / bk].
struct Fp8Dev {
    const uint32_t* words = nullptr;  // tiles (quant/tile_layout.h) x [32][8]
    const float* scales = nullptr;
    int64_t N = 0, K = 0, NT = 0, KC = 0, bn = 1, bk = 1, SN = 0, SG = 0;
    // The tile order (tile_layout.h TileOrder). The n-tile-major ones are what mlp_fp8 reads (gate | up either,
    // down kNtMajor); qmm_fp8 takes them on its one-pass kernel only (whole-chunk scale groups, no forced grid),
    // dequant_fp8 and unpack_fp8 on every shape.
    int tile_order = 0;
};

// Stream-K partials and per-column-block arrival counters the qmm kernels share (sequential on one stream).
// `counters` must be zero before the first launch; every launch leaves them zero.
struct QmmWorkspace {
    float* partials = nullptr;
    size_t partial_bytes = 0;
    int* counters = nullptr;
    int n_counters = 0;
};
// What a weight of [N, K] needs, for any M up to kQmmMaxM (so one reservation at load time covers every step).
void qmm_workspace_need(int64_t N, int64_t K, size_t* partial_bytes, int* n_counters);
// Whether qmm_* take this scale grid (groups of 16, 32 or a multiple of 64 channels, or one group); other group
// sizes run every M through dequant_* and a GEMM.
bool qmm_supported(int64_t group_size, int64_t G);

// The output of a stacked group written straight into its parts: columns [col[i], col[i + 1]) of y go to
// data[i], a contiguous [M, col[i + 1] - col[i]] tensor of y's dtype (no split_cols launch after the GEMM).
constexpr int kQmmMaxParts = 8;
//
// glu = 1 (a stacked [gate; up] weight, N = 2 I): one part, data[0] = h [M, I] = silu(g) * u with g, u the two
// halves of y rounded to y's dtype as stored parts would be, the same formula as silu_mul (the halves never
// leave the kernel: each block pairs gate n-tile t with up n-tile t + NT / 2). Only where qmm_glu_ok says so.
//
// conv = 1 (one row: the q | k | v part of a Gated DeltaNet in_proj): part 0's columns go through the depthwise
// causal conv + SiLU as they are stored. With C = part 0's width: data[0] [1, C] = silu(sum_j conv_w[c][j] *
// row_j) over the conv_k - 1 rows of conv_state [conv_k - 1, C] (oldest first) and this row (rounded to y's
// dtype as a stored part would be), and conv_state moves on by this row: conv1d_silu's step kernel, same
// formula and order. conv_wdt / conv_sdt are kernel dtype codes (common.cuh dt_code); conv_k must be kQmmConvK.
constexpr int kQmmConvK = 4;
// The kernel dtype code of F32 / BF16 / F16 (for QmmParts::conv_wdt / conv_sdt), or -1.
int qmm_dtype_code(DType t);
// Whether qmm_int4 / qmm_fp8 take conv parts for M rows: one row on every kernel, 2..16 rows on the one-pass
// kernel (its blocks own their columns over all rows).
bool qmm_conv_ok(bool fp8, bool asym, int64_t M, int64_t N, int64_t K, int64_t group_size, int64_t G);
struct QmmParts {
    int n = 0;
    int col[kQmmMaxParts + 1] = {};
    void* data[kQmmMaxParts] = {};
    int glu = 0;
    int conv = 0, conv_k = 0, conv_wdt = 0, conv_sdt = 0;
    const void* conv_w = nullptr;  // [C, conv_k]
    void* conv_state = nullptr;    // [conv_k - 1, C]
};
// Whether qmm_int4 / qmm_fp8 take glu parts for M rows of an [N, K] weight with these scale groups: the
// one-pass kernel with two-tile blocks (N a multiple of 32; FP8 2..8 rows).
bool qmm_glu_ok(bool fp8, bool asym, int64_t M, int64_t N, int64_t K, int64_t group_size, int64_t G);

// x [M, K] BF16 or F32; y [M, N] BF16 or F32. `blocks` > 0 forces the grid size (tests use it to exercise
// column blocks split between many grid blocks), else the dispatch's choice. With `parts`, y gives only the
// shape and dtype (its data may be null) and the result goes to the parts.
void qmm_int4(const Int4Dev& w,
              const Tensor& x,
              Tensor& y,
              const QmmWorkspace& ws,
              cudaStream_t s,
              int blocks = 0,
              const QmmParts* parts = nullptr);
void qmm_fp8(const Fp8Dev& w,
             const Tensor& x,
             Tensor& y,
             const QmmWorkspace& ws,
             cudaStream_t s,
             int blocks = 0,
             const QmmParts* parts = nullptr);

// ---- The one-row FP8 MLP block in one persistent launch (mlp_fp8.cu; decode) ----
// y [1, D] BF16 = down (silu(g) * u) with [g | u] = gate_up x: gate_up a stacked [gate; up] weight [2 I, D],
// down [D, I], both FP8 block-scaled with 128-channel scale groups and packed n-tile-major (Fp8Dev::tile_order;
// gate | up kNtMajor or kNtMajorPaired, down kNtMajor);
// h [1, I] BF16 receives silu(g) * u (g, u and h rounded to BF16 as forward_glu's parts and silu_mul would).
// One block per SM streams one contiguous range of each weight through a shared-memory ring across the grid
// barrier between the projections. Deterministic; the workspace is the qmm kernels' (reserve
// mlp_fp8_workspace_need(D, I) too), its counters left at zero.
// With pre: the residual add + RMSNorm in front of the block too (add_rmsnorm's math), x then unused:
// res [1, D] BF16 += y_in [1, D] BF16 and the block's input is bf16(rmsnorm(res) * (w_offset + w)), w [D] f32.
// y_in may be the output y (every block reads it before any writes y), not res.
struct MlpPreNorm {
    Tensor res, y;
    const float* w = nullptr;
    float eps = 0.0f, w_offset = 0.0f;
};
bool mlp_fp8_ok(const Fp8Dev& gate_up, const Fp8Dev& down);
bool mlp_fp8_prenorm_ok(int64_t D);
void mlp_fp8_workspace_need(int64_t D, int64_t I, size_t* partial_bytes, int* n_counters);
void mlp_fp8(const Fp8Dev& gate_up, const Fp8Dev& down, const Tensor& x, Tensor& h, Tensor& y,
             const QmmWorkspace& ws, cudaStream_t s, const MlpPreNorm* pre = nullptr);
// Benchmark variants: math 1 the kernel as mlp_fp8 runs it, 0 the tiles taken without computing (h, y
// meaningless: the streaming floor), 2 the math with every scale 1 (wrong results: the scale loads' cost);
// trace non-null receives [grid][9] globaltimer marks; prefetch_kb >= 0 sets how much of down's range each block
// asks of L2 ahead of its ring (mlp_fp8.cu; the default otherwise).
void mlp_fp8_variant(const Fp8Dev& gate_up, const Fp8Dev& down, const Tensor& x, Tensor& h, Tensor& y,
                     const QmmWorkspace& ws, cudaStream_t s, int math, unsigned long long* trace = nullptr,
                     int prefetch_kb = -1, const MlpPreNorm* pre = nullptr);

// out [N, K] BF16 or F32 = the dequantized weight in the checkpoint's channel order.
void dequant_int4(const Int4Dev& w, void* out, DType out_dtype, cudaStream_t s);
void dequant_fp8(const Fp8Dev& w, void* out, DType out_dtype, cudaStream_t s);

// ---- The W8A8 FP8 prefill path of a 128 x 128-block FP8 weight (M > 16 rows; the BF16 dequant + GEMM otherwise) ----
// out [N, K] e4m3 = the weight's codes in the checkpoint's row-major order (16-byte aligned; K % 128 == 0).
void unpack_fp8(const Fp8Dev& w, uint8_t* out, cudaStream_t s);
// x [M, K] BF16 -> q [M4, K] e4m3 and scales [K / 128][M4] f32 (row fastest), per 128-channel block of a row:
// kernels/cpu/dequant.h quantize_act_fp8, code for code. Rows M..M4-1 (M4 a multiple of 4) get zero codes and
// scale 0. K % 128 == 0.
void quant_act_fp8(const Tensor& x, int64_t M4, uint8_t* q, float* scales, cudaStream_t s);
// y [M4, N] BF16 (row-major, row stride N) = sum over 128-channel blocks kb of
//     xs[kb][m] * ws[n / 128][kb] * sum_{k in kb} e4m3(xq[m][k]) * e4m3(wq[n][k])
// through cuBLASLt's block-scaled FP8 matmul (gemm_fp8_block.cu). wq [N, K] e4m3 (unpack_fp8), ws
// [ceil(N / 128)][round_up(K / 128, 4)] f32, xq / xs from quant_act_fp8; lt_ws a cuBLASLt workspace. Every
// pointer 16-byte aligned; M4 % 4 == 0, N % 16 == 0, K % 128 == 0.
struct Fp8BlockGemm {
    const uint8_t* wq = nullptr;
    const float* ws = nullptr;
    const uint8_t* xq = nullptr;
    const float* xs = nullptr;
    void* y = nullptr;
    int64_t M4 = 0, N = 0, K = 0;
    void* lt_ws = nullptr;
    size_t lt_ws_bytes = 0;
};
// Whether cuBLASLt has an algorithm for this shape on this device (block-scaled FP8 is sm_90 only); asked once
// per shape and cached. gemm_fp8_block throws where this is false.
bool gemm_fp8_block_ok(int64_t M4, int64_t N, int64_t K, size_t lt_ws_bytes);
void gemm_fp8_block(const Fp8BlockGemm& g, cudaStream_t s);

// n u32 words of pseudo-random bits (SplitMix64 of seed and index), ANDed with `mask` (FP8: 0xBFBFBFBF keeps
// every byte finite). Used for --random-weights of quantized layers.
void random_bits(uint32_t* p, int64_t n, uint64_t seed, uint32_t mask, cudaStream_t s);

}  // namespace grimoire::cuda
