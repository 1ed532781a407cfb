// x's group sums for the zero point's term of quant_qmv.cuh's INT4 kernel (sum_k (q_k - z) x_k = sum_k (128 +
// q_k) x_k - (128 + z) sum_k x_k): the chunk sums by all-ones mma, and their moves to the main mma's C
// layout.
#pragma once

#include "kernels/cuda/quant_mma.cuh"

namespace grimoire::cuda::qmm {

// x's sums over one chunk's four k-tiles (the zero point's term), as C fragments; `first`: the chunk opens a
// scale group, so its first mma starts the sums. XT (9..16 rows, NH = 2): the k-tile's two B fragments are,
// register for register, x's own A fragment (rows = the 16 tokens), so one mma against an all-ones B sums
// every token, into xt (token r in lane 4 (r % 8), entry 2 (r / 8)); else one all-ones-A mma per B operand,
// into xs[h] (entries 0 / 1: the lane's tokens 8 h + 2 t, + 1). XA (kQmvXsumQuad, any NH): each B
// operand's two 16-byte x words (b0[h][0], b1[h][0], b0[h][1], b1[h][1] and the same for k-tiles 2, 3) are,
// as loaded, an A fragment whose rows g and g + 8 both hold token g + 8 h (rows g the first eight channels of
// each k-tile, rows g + 8 the last eight), so two mma per operand against an all-ones B sum the chunk for
// that token without a register move: xa[h][0] + xa[h][2] is its sum.
template <bool XT, int NH, bool F16 = false, bool XA = false>
__device__ __forceinline__ void qmv_chunk_xsums(const uint32_t (&b0)[NH][4],
                                                const uint32_t (&b1)[NH][4],
                                                bool first,
                                                float (&xt)[4],
                                                float (&xs)[NH][4],
                                                float (&xa)[NH][4]) {
    constexpr uint32_t kOnes = F16 ? 0x3C003C00u : 0x3F803F80u;  // FP16x2 / BF16x2 of 1.0
    static_assert(!F16 || (!XT && NH == 1), "FP16: one row only");
    if constexpr (XA) {
#pragma unroll
        for (int h = 0; h < NH; ++h)
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int k = 2 * p;
                if constexpr (F16) {  // one row: x staged as FP16 times 2^sh, the sums in the same scale
                    if (first && p == 0)
                        mma_f16_first(xa[h], b0[h][k], b1[h][k], b0[h][k + 1], b1[h][k + 1], kOnes, kOnes);
                    else
                        mma_f16(xa[h], b0[h][k], b1[h][k], b0[h][k + 1], b1[h][k + 1], kOnes, kOnes);
                } else if (first && p == 0) {
                    mma_bf16_first(xa[h], b0[h][k], b1[h][k], b0[h][k + 1], b1[h][k + 1], kOnes, kOnes);
                } else {
                    mma_bf16(xa[h], b0[h][k], b1[h][k], b0[h][k + 1], b1[h][k + 1], kOnes, kOnes);
                }
            }
    } else if constexpr (XT) {
        static_assert(NH == 2, "x as A holds 16 tokens");
#pragma unroll
        for (int kt = 0; kt < 4; ++kt) {
            if (first && kt == 0)
                mma_bf16_first(xt, b0[0][kt], b0[1][kt], b1[0][kt], b1[1][kt], kOnes, kOnes);
            else
                mma_bf16(xt, b0[0][kt], b0[1][kt], b1[0][kt], b1[1][kt], kOnes, kOnes);
        }
    } else {
#pragma unroll
        for (int h = 0; h < NH; ++h)
#pragma unroll
            for (int kt = 0; kt < 4; ++kt) {
                if constexpr (F16) {
                    if (first && kt == 0)
                        mma_f16_first(xs[h], kOnes, kOnes, kOnes, kOnes, b0[h][kt], b1[h][kt]);
                    else
                        mma_f16(xs[h], kOnes, kOnes, kOnes, kOnes, b0[h][kt], b1[h][kt]);
                } else if (first && kt == 0) {
                    mma_bf16_first(xs[h], kOnes, kOnes, kOnes, kOnes, b0[h][kt], b1[h][kt]);
                } else {
                    mma_bf16(xs[h], kOnes, kOnes, kOnes, kOnes, b0[h][kt], b1[h][kt]);
                }
            }
    }
}
// XA's sums moved to the main mma's C layout: xs[h][0 / 1] = tokens 8 h + 2 t, + 1 (a lane of row group g
// holds token g + 8 h's).
template <int NH>
__device__ __forceinline__ void qmv_xa_sums(const float (&xa)[NH][4], int t, float (&xs)[NH][4]) {
#pragma unroll
    for (int h = 0; h < NH; ++h) {
        const float sum = xa[h][0] + xa[h][2];
        xs[h][0] = __shfl_sync(0xFFFFFFFFu, sum, 8 * t), xs[h][1] = __shfl_sync(0xFFFFFFFFu, sum, 8 * t + 4);
    }
}
// XT's sums moved to the main mma's C layout: xs[h][0 / 1] = tokens 8 h + 2 t, + 1 (four shuffles).
__device__ __forceinline__ void qmv_xt_sums(const float (&xt)[4], int t, float (&xs)[2][4]) {
    const int l0 = 8 * t, l1 = 8 * t + 4;
    xs[0][0] = __shfl_sync(0xFFFFFFFFu, xt[0], l0), xs[0][1] = __shfl_sync(0xFFFFFFFFu, xt[0], l1);
    xs[1][0] = __shfl_sync(0xFFFFFFFFu, xt[2], l0), xs[1][1] = __shfl_sync(0xFFFFFFFFu, xt[2], l1);
}

}  // namespace grimoire::cuda::qmm
