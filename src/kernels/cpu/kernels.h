// The CPU reference kernels, on raw pointers (one op per .cpp file beside this header). CpuBackend
// validates shapes and dtypes and calls these; tests and other backends' references may call them directly.
// Every activation is fp32 and row-major; weights for matmul/embedding may be BF16, F16 or F32.
// Loops that are worth it run on core/threadpool.h parallel_for, which is NOT reentrant: no kernel here
// calls another parallel kernel from inside a parallel region.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "core/dtype.h"

namespace grimoire::cpu {

// out[t, :] = table[ids[t], :] converted to fp32.
void embedding(const void* table,   // [V, H] f32/bf16/f16
               DType table_dtype,
               int64_t V, int64_t H,
               const int32_t* ids,  // [T] i32, each in [0, V)
               int64_t T,
               float* out);         // [T, H] f32

// out = x * rsqrt(mean(x^2) + eps) * (w or 1 + w), row by row; out may alias x.
void rmsnorm(const float* x,  // [R, D] f32
             const float* w,  // [D] f32
             int64_t R, int64_t D, float eps, NormKind kind,
             float* out);     // [R, D] f32

// out = w * (x * rsqrt(mean(x^2) + eps)) * silu(z); out may alias x.
void rmsnorm_gated(const float* x,  // [R, D] f32
                   const float* z,  // [R, D] f32
                   const float* w,  // [D] f32
                   int64_t R, int64_t D, float eps,
                   float* out);     // [R, D] f32

void add(const float* a, const float* b, float* out, int64_t n);    // out = a + b, [n] f32
void scale(float* x, int64_t n, float s);                           // x *= s
void mul_sigmoid(float* x, const float* gate, int64_t n);           // x *= sigmoid(gate)
void silu_mul(const float* gate, const float* up, float* out, int64_t n);  // out = silu(gate) * up
void add_bias(float* x, const float* bias, int64_t T, int64_t N);  // x [T, N] += bias [N]

// out [R, n] = src [R, C] columns [c0, c0 + n); elements of `elem` bytes.
void copy_cols(const void* src, int64_t R, int64_t C, int64_t c0, int64_t n, size_t elem, void* out);

// In-place rotary embedding of x [T, H, D] at positions[t]; dims >= p.rot_dim are untouched.
void rope(float* x,                // [T, H, D] f32
          int64_t T, int64_t H, int64_t D,
          const int32_t* positions,  // [T] i32
          const RopeParams& p);

// Causal GQA attention with the cache (see Backend::attention): writes k, v at cache rows n_past..n_past+T-1,
// then out[t, h] = softmax over rows 0..n_past+t of (q[t,h] . k_cache[j, h/(Hq/Hkv)]) * scale, times v.
void attention(const float* q,  // [T, Hq, D] f32
               const float* k,  // [T, Hkv, D] f32
               const float* v,  // [T, Hkv, D] f32
               float* k_cache,  // [max_ctx, Hkv, D] f32
               float* v_cache,  // [max_ctx, Hkv, D] f32
               int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t max_ctx, int64_t n_past, float scale,
               float* out);     // [T, Hq, D] f32

// Depthwise causal conv (tap K-1 = current token) + SiLU, carrying the previous K-1 input rows in state.
void conv1d_silu(const float* x,  // [T, C] f32
                 const float* w,  // [C, K] f32
                 float* state,    // [K-1, C] f32, oldest row first; updated
                 int64_t T, int64_t C, int64_t K,
                 float* out);     // [T, C] f32

// Gated DeltaNet, recurrent form (token by token); math in Backend::gated_delta_rule.
struct GdnShape {
    int64_t T, Hk, Hv, dk, dv;
};
void gated_delta_rule(const float* q,        // [T, Hk, dk] f32
                      const float* k,        // [T, Hk, dk] f32
                      const float* v,        // [T, Hv, dv] f32
                      const float* a,        // [T, Hv] f32
                      const float* b,        // [T, Hv] f32
                      const float* A_log,    // [Hv] f32
                      const float* dt_bias,  // [Hv] f32
                      float* state,          // [Hv, dk, dv] f32, updated
                      const GdnShape& s,
                      float* out);           // [T, Hv, dv] f32

// out [T, N] = x [T, K] @ w [N, K]^T, fp32 accumulation; multi-threaded over N.
void matmul(const float* x,  // [T, K] f32
            const void* w,   // [N, K] bf16/f16/f32
            DType w_dtype,
            int64_t T, int64_t K, int64_t N,
            float* out);     // [T, N] f32

// matmul's kernel for `rows` fp32 weight rows on the calling thread: out[t * N + r] = x[t, :] . w[r, :] for
// r < rows (out points at the rows' first column of a [T, N] output): the same sums in the same order as
// matmul with an F32 weight. The quantized matmuls (dequant.h) run it on the tiles they dequantize.
void matmul_rows_f32(const float* x,  // [T, K] f32
                     const float* w,  // [rows, K] f32
                     int64_t T, int64_t K, int64_t N, int64_t rows,
                     float* out);     // [T, N] f32, columns [0, rows) written

}  // namespace grimoire::cpu
