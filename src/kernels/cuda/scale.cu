// x *= s in place.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

static __global__ void scale_kernel(void* x, int xdt, int64_t n, float v) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        st(x, xdt, i, ld(x, xdt, i) * v);
}

static void launch_scale(void* x, int xdt, int64_t n, float v, cudaStream_t s) {
    scale_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, xdt, n, v);
    check_launch("scale");
}

void scale(Tensor& x, float v, cudaStream_t s) {
    if (x.numel() == 0) return;
    launch_scale(x.data, dt_code(x.dtype, "scale", "x"), x.numel(), v, s);
}

}  // namespace grimoire::cuda
