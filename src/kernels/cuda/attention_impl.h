// Internal to the attention op: the launchers of its decode (split-K) and prefill (flash) halves, and the
// split heuristic both the decode kernels and the workspace sizing use.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace grimoire::cuda::attn {

// Split-K flash-decoding: a split covers at least kMinKeysPerSplit cache rows and there are at most kMaxSplits,
// e.g. length 300 -> 10 splits of 30; 4096 -> 128 of 32; 32768 -> 128 of 256. Computed on the device from the
// current length, so a graph captured at one length stays right at every other. (Each warp walks its rows one
// tile after another, latency-bound, so a short walk on every SM wins: 64 splits of >= 64 rows left a 27B
// layer's 4 KV heads at length 512 with 36 blocks, a 2 MB read on a quarter of the SMs; with 32, a split is
// one 8-row tile per warp of decode_tile_kernel.)
constexpr int kMaxSplits = 128;
constexpr int kMinKeysPerSplit = 32;
// launch_decode takes up to this many query tokens (each with kMaxSplits / T split slots of the workspace).
constexpr int kMaxDecodeTokens = 8;  // = kernels.h's kAttnDecodeMaxT
__host__ __device__ constexpr int num_splits(int64_t len, int min_keys = kMinKeysPerSplit) {
    const int64_t n = (len + min_keys - 1) / min_keys;
    return static_cast<int>(n < 1 ? 1 : (n > kMaxSplits ? kMaxSplits : n));
}

struct Geometry {
    int64_t T, Hq, Hkv, D, max_ctx;
};

// g.T <= kMaxDecodeTokens query tokens [T, Hq, D]; token t's length is n_past_dev[t] + 1 (n_past + t + 1
// without n_past_dev). kv_dt/q_dt/o_dt are the dtype codes of common.cuh. `ws` holds Hq * kMaxSplits * (D + 2) floats.
// With `gate` (Backend::gated_attention_core) the merge multiplies head h's output by sigmoid(gate[h *
// gate_stride + d]) after rounding it to o_dt, as a separate mul_sigmoid would.
void launch_decode(const void* q,
                   int q_dt,
                   const void* k_cache,
                   const void* v_cache,
                   int kv_dt,
                   const Geometry& g,
                   int64_t n_past,
                   const int* n_past_dev,
                   float scale,
                   float* ws,
                   void* out,
                   int o_dt,
                   cudaStream_t s,
                   const void* gate = nullptr,
                   int gate_dt = 0,
                   int64_t gate_stride = 0,
                   bool ahead = false);
void launch_prefill(const void* q, int q_dt, const void* k_cache, const void* v_cache, int kv_dt,
                    const Geometry& g, int64_t n_past, const int* n_past_dev, float scale, void* out, int o_dt,
                    cudaStream_t s);

// Tensor-core (FlashAttention-2 style) prefill for BF16 caches and head_dim 32/64/128/256; false when it does
// not apply (other head_dims, caches not 16-byte aligned, out not 8-byte aligned): the caller then uses
// launch_prefill.
bool launch_prefill_tc(const void* q, int q_dt, const void* k_cache, const void* v_cache, const Geometry& g,
                       int64_t n_past, const int* n_past_dev, float scale, void* out, int o_dt, cudaStream_t s);

}  // namespace grimoire::cuda::attn
