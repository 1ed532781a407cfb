// x [T, N] += bias [N].
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

static __global__ void add_bias_kernel(void* x, int xdt, const void* bias, int bdt, int64_t n, int64_t N) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        st(x, xdt, i, ld(x, xdt, i) + ld(bias, bdt, i % N));
}

static void launch_add_bias(void* x, int xdt, const void* bias, int bdt, int64_t n, int64_t N, cudaStream_t s) {
    add_bias_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, xdt, bias, bdt, n, N);
    check_launch("add_bias");
}

void add_bias(Tensor& x, const Tensor& bias, cudaStream_t s) {
    if (bias.numel() != x.cols()) throw Error("cuda add_bias: bias [N] must match x [T, N]");
    if (x.numel() == 0) return;
    launch_add_bias(x.data, dt_code(x.dtype, "add_bias", "x"), bias.data, dt_code(bias.dtype, "add_bias", "bias"),
                    x.numel(), x.cols(), s);
}

}  // namespace grimoire::cuda
