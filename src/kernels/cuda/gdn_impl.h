// Internal to the gated_delta_rule op: the parameter block its recurrent (decode) and chunked (prefill)
// kernels share, and the chunked path's launcher and workspace size.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace grimoire::cuda::gdn {

struct GdnParams {
    const void* q; const void* k; const void* v; const void* a; const void* b;  // [T,Hk,dk] x2, [T,Hv,dv], [T,Hv] x2
    const void* A_log; const void* dt_bias;                                     // [Hv]
    float* state;                                                               // [Hv, dk, dv] f32
    void* out;                                                                  // [T, Hv, dv]
    int qdt, kdt, vdt, adt, bdt, Adt, ddt, odt;
    int64_t T, Hk, Hv, dk, dv;
    // Elements from one token's q / k / v row to the next: Hk dk, Hk dk, Hv dv for separate tensors, the conv
    // output's width C when the three are read in place from q | k | v (gated_delta_rule_qkv).
    int64_t qs, ks, vs;
    int64_t ab_s;  // elements between tokens' a (and b) rows: Hv, or a stacked projection's width read in place
};

constexpr int kChunk = 64;
// Prompts of at least this many tokens take the chunked path (fewer: the token-by-token kernel is cheaper).
constexpr int64_t kChunkedMinT = 64;
size_t chunked_ws_bytes(int64_t T, int64_t Hv, int64_t dk, int64_t dv);
// Takes the tensor-core path when tc_supported and not simt_forced(); ws then needs only tc_ws_bytes.
void launch_chunked(const GdnParams& p, float* ws, cudaStream_t s);
bool simt_forced();  // GRIMOIRE_GDN_SIMT=1

// The tensor-core chunked path (gdn_chunk_tc.cu): BF16 q, k, v (16-byte aligned), dk <= 128 and dk, dv
// multiples of 8. launch_chunked takes it when supported; other dtypes / shapes keep the fp32 SIMT kernels.
bool tc_supported(const GdnParams& p);
size_t tc_ws_bytes(int64_t T, int64_t Hv);
void launch_chunked_tc(const GdnParams& p, void* ws, cudaStream_t s);

}  // namespace grimoire::cuda::gdn
