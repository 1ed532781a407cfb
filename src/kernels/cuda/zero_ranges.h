// One launch that zero-fills a list of device byte ranges: SequenceState::reset zeroes every DeltaNet layer's
// conv and recurrent state (96 tensors on the 27B), which as separate memsets cost a launch each.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace grimoire::cuda {

constexpr int kMaxZeroRanges = 128;

struct ZeroRanges {
    void* ptr[kMaxZeroRanges];
    size_t bytes[kMaxZeroRanges];
    int n = 0;
};

void zero_ranges(const ZeroRanges& r, cudaStream_t s);

}  // namespace grimoire::cuda
