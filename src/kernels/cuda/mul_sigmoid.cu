// x *= sigmoid(gate): the output gate of Qwen3.5 gated attention.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

static __global__ void mul_sigmoid_kernel(void* x, int xdt, const void* gate, int gdt, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        st(x, xdt, i, ld(x, xdt, i) * sigmoidf_(ld(gate, gdt, i)));
}

static void launch_mul_sigmoid(void* x, int xdt, const void* gate, int gdt, int64_t n, cudaStream_t s) {
    mul_sigmoid_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, xdt, gate, gdt, n);
    check_launch("mul_sigmoid");
}

void mul_sigmoid(Tensor& x, const Tensor& gate, cudaStream_t s) {
    if (gate.numel() != x.numel()) throw Error("cuda mul_sigmoid: x and gate sizes differ");
    if (x.numel() == 0) return;
    launch_mul_sigmoid(x.data, dt_code(x.dtype, "mul_sigmoid", "x"), gate.data,
                       dt_code(gate.dtype, "mul_sigmoid", "gate"), x.numel(), s);
}

}  // namespace grimoire::cuda
