// Weights asked of L2 by a latency-bound kernel (Backend::l2_prefetch; the device side is common.cuh
// l2_prefetch_share).
// The DeltaNet step and the gated attention's decode run for ~10-20 us a 27B layer against ~1 us of their own
// bytes: HBM idles under them, and the projection after them (out_proj / o_proj) then streams its weight from
// a cold start. A kernel handed an L2Prefetch asks L2 for these ranges once its programmatic-launch wait returns
// (its predecessor's weight stream is over), each block a share, so the next projection reads them from L2.
// Results never depend on it. Addresses 16-byte aligned, sizes multiples of 16 (CudaBackend trims them).
// Measured slower, so off by default (H100, docs/BENCHMARKS.md session 31: at 48 MB the 27B decode fell from
// 0.858 to 0.748 of roofline for FP8 and from 0.794 to 0.703 for INT4).
#pragma once
#include <cstdint>

namespace grimoire::cuda {

constexpr int kL2PrefetchRanges = 4;
struct L2Prefetch {
    const void* p[kL2PrefetchRanges] = {};
    uint32_t bytes[kL2PrefetchRanges] = {};
    int n = 0;
};

}  // namespace grimoire::cuda
