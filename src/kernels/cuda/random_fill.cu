// Deterministic pseudo-random fill for --random-weights: value = offset + amp * (2u - 1) with u from a
// SplitMix64 hash of (seed, index), so any element is reproducible without generator state.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

namespace {
__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
}  // namespace

static __global__ void random_fill_kernel(void* p, int dt, int64_t n, uint64_t seed, float amp, float offset) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const uint64_t h = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(i)));
        const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // 24 bits -> [0, 1)
        st(p, dt, i, offset + amp * (2.0f * u - 1.0f));
    }
}

static void launch_random_fill(void* p, int dt, int64_t n, uint64_t seed, float amp, float offset, cudaStream_t s) {
    random_fill_kernel<<<grid_for(n, 256) > 8192 ? 8192 : grid_for(n, 256), 256, 0, s>>>(p, dt, n, seed, amp, offset);
    check_launch("random_fill");
}

void random_fill(void* p, DType dtype, int64_t n, uint64_t seed, float amp, float offset, cudaStream_t s) {
    if (n == 0) return;
    launch_random_fill(p, dt_code(dtype, "random_fill", "dst"), n, seed, amp, offset, s);
}

}  // namespace grimoire::cuda
