// SwiGLU: out = silu(gate) * up.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

static __global__ void silu_mul_kernel(const void* gate, int gdt, const void* up, int udt, void* out, int odt,
                                       int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float g = ld(gate, gdt, i);
        st(out, odt, i, g * sigmoidf_(g) * ld(up, udt, i));
    }
}

static void launch_silu_mul(const void* gate, int gdt, const void* up, int udt, void* out, int odt, int64_t n,
                            cudaStream_t s) {
    silu_mul_kernel<<<grid_for(n, 256), 256, 0, s>>>(gate, gdt, up, udt, out, odt, n);
    check_launch("silu_mul");
}

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, cudaStream_t s) {
    if (gate.numel() != up.numel() || out.numel() != gate.numel()) throw Error("cuda silu_mul: sizes differ");
    if (gate.numel() == 0) return;
    launch_silu_mul(gate.data, dt_code(gate.dtype, "silu_mul", "gate"), up.data, dt_code(up.dtype, "silu_mul", "up"),
                    out.data, dt_code(out.dtype, "silu_mul", "out"), gate.numel(), s);
}

}  // namespace grimoire::cuda
