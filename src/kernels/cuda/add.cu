// out = a + b element-wise (residual adds); any mix of F32/BF16/F16.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

static __global__ void add_kernel(const void* a, int adt, const void* b, int bdt, void* out, int odt, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        st(out, odt, i, ld(a, adt, i) + ld(b, bdt, i));
}

static void launch_add(const void* a, int adt, const void* b, int bdt, void* out, int odt, int64_t n,
                       cudaStream_t s) {
    add_kernel<<<grid_for(n, 256), 256, 0, s>>>(a, adt, b, bdt, out, odt, n);
    check_launch("add");
}

void add(const Tensor& a, const Tensor& b, Tensor& out, cudaStream_t s) {
    if (a.numel() != b.numel() || out.numel() != a.numel()) throw Error("cuda add: a, b, out sizes differ");
    if (a.numel() == 0) return;
    launch_add(a.data, dt_code(a.dtype, "add", "a"), b.data, dt_code(b.dtype, "add", "b"), out.data,
               dt_code(out.dtype, "add", "out"), a.numel(), s);
}

}  // namespace grimoire::cuda
