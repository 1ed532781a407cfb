// Zero-fills the ranges of a ZeroRanges list: blockIdx.y picks the range, the x blocks stride over it in
// 16-byte stores (bytes before the first 16-byte boundary and after the last one one at a time).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/zero_ranges.h"

namespace grimoire::cuda {

static __global__ void zero_ranges_kernel(ZeroRanges r) {
    auto* p = static_cast<unsigned char*>(r.ptr[blockIdx.y]);
    const size_t n = r.bytes[blockIdx.y];
    const size_t mis = reinterpret_cast<uintptr_t>(p) % 16;
    const size_t head = mis == 0 ? 0 : (16 - mis < n ? 16 - mis : n);
    const size_t nvec = (n - head) / 16;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    uint4* v = reinterpret_cast<uint4*>(p + head);
    for (size_t i = tid; i < nvec; i += stride) v[i] = make_uint4(0, 0, 0, 0);
    if (tid < head) p[tid] = 0;
    const size_t tail0 = head + nvec * 16;
    if (tid < n - tail0) p[tail0 + tid] = 0;
}

void zero_ranges(const ZeroRanges& r, cudaStream_t s) {
    if (r.n <= 0) return;
    if (r.n > kMaxZeroRanges) throw Error("cuda zero_ranges: more than " + std::to_string(kMaxZeroRanges) + " ranges");
    size_t most = 0;
    for (int i = 0; i < r.n; ++i) most = r.bytes[i] > most ? r.bytes[i] : most;
    const size_t blocks = (most / 16 + 255) / 256;
    const unsigned gx = static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 1024 ? 1024 : blocks));
    zero_ranges_kernel<<<dim3(gx, static_cast<unsigned>(r.n)), 256, 0, s>>>(r);
    check_launch("zero_ranges");
}

}  // namespace grimoire::cuda
