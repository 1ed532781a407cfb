// Gated DeltaNet, chunked (prefill) form: the same function as cpu::gated_delta_rule (kernels.h), computed a
// chunk of C tokens at a time with the WY / UT-transform representation (models-and-formats.md §1.4 step 8), so
// most of the work is small dense products instead of T sequential rank-1 state updates. It is the reference
// the CUDA prefill kernel is written against; tests hold it equal to the recurrent kernel.
#pragma once
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace grimoire::cpu {

// Same contract as gated_delta_rule: L2-normalised q, k (eps 1e-6), q *= dk^-0.5, beta = sigmoid(b),
// g = -exp(A_log) * softplus(a + dt_bias), value head h reads key head h / (Hv / Hk); state continues from its
// incoming value. A last chunk shorter than `chunk` is computed at its own length (no padding needed).
void gated_delta_chunked(const float* q,        // [T, Hk, dk] f32
                         const float* k,        // [T, Hk, dk] f32
                         const float* v,        // [T, Hv, dv] f32
                         const float* a,        // [T, Hv] f32
                         const float* b,        // [T, Hv] f32
                         const float* A_log,    // [Hv] f32
                         const float* dt_bias,  // [Hv] f32
                         float* state,          // [Hv, dk, dv] f32, updated
                         const GdnShape& s,
                         float* out,            // [T, Hv, dv] f32
                         int64_t chunk = 64);

}  // namespace grimoire::cpu
