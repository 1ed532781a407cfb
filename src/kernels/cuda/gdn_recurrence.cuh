// The per-token body of the Gated DeltaNet recurrence shared by the decode kernels (gated_delta_rule.cu's
// token-by-token kernel and fused_gdn_step.cu): a block owns state columns, thread (tx, ty) keeps column tx's
// rows ty, ty + kRowGroups, ... in registers (nr of them).
#pragma once
#include "kernels/cuda/common.cuh"

namespace grimoire::cuda::gdn {

__device__ __forceinline__ float softplus_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// The thread's slice of value head state S [dk, dv] (column j, rows ty + m * kRowGroups, m < nr) in and out.
template <int kRowGroups, int kRows>
__device__ __forceinline__ void load_state(float (&s)[kRows], const float* S, int nr, int ty, int64_t j, int64_t dv,
                                           bool col_ok) {
#pragma unroll
    for (int m = 0; m < kRows; ++m) s[m] = (m < nr && col_ok) ? S[(ty + m * kRowGroups) * dv + j] : 0.0f;
}
template <int kRowGroups, int kRows>
__device__ __forceinline__ void store_state(const float (&s)[kRows], float* S, int nr, int ty, int64_t j, int64_t dv,
                                            bool col_ok) {
#pragma unroll
    for (int m = 0; m < kRows; ++m)
        if (m < nr && col_ok) S[(ty + m * kRowGroups) * dv + j] = s[m];
}

// L2-normalises one token's q and k of the block's key head into shared qn, kn [dk] (q also scaled by
// dk^-0.5); threads tid < dk supply qv, kv. Ends with a barrier, so qn / kn are visible.
__device__ __forceinline__ void normalise_qk(float qv, float kv, int tid, int64_t dk, float qscale, float* qn,
                                             float* kn, float* red /* [32] shared */) {
    const float qss = block_sum(qv * qv, red);
    const float kss = block_sum(kv * kv, red);
    if (tid < dk) {
        qn[tid] = qv * rsqrtf(qss + 1e-6f) * qscale;
        kn[tid] = kv * rsqrtf(kss + 1e-6f);
    }
    __syncthreads();
}

// One token: S *= decay; u = beta (v_j - S^T k); S += k u^T; returns o_j = (S^T q)_j, the column sums over
// the row groups reduced through `part`. Every thread gets o_j; the caller needs a barrier before `part`,
// qn or kn are written again.
template <int kRowGroups, int kRows, int kCols>
__device__ __forceinline__ float token_step(float (&s)[kRows], int nr, int tx, int ty, const float* qn, const float* kn,
                                            float decay, float beta, float vj, float (&part)[kRowGroups][kCols]) {
    float acc = 0.0f;
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
        if (m < nr) {
            s[m] *= decay;
            acc += s[m] * kn[ty + m * kRowGroups];
        }
    }
    part[ty][tx] = acc;
    __syncthreads();
    float sk = 0.0f;
#pragma unroll
    for (int g = 0; g < kRowGroups; ++g) sk += part[g][tx];
    const float u = beta * (vj - sk);
    __syncthreads();  // everyone has read part[] before it is reused

    float o = 0.0f;
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
        if (m < nr) {
            s[m] += kn[ty + m * kRowGroups] * u;
            o += s[m] * qn[ty + m * kRowGroups];
        }
    }
    part[ty][tx] = o;
    __syncthreads();
    float oj = 0.0f;
#pragma unroll
    for (int g = 0; g < kRowGroups; ++g) oj += part[g][tx];
    return oj;
}

}  // namespace grimoire::cuda::gdn
