// Element-wise dtype conversion between F32, BF16 and F16 (GEMM inputs, uploads of mismatched weights).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

static __global__ void convert_kernel(const void* src, int sdt, void* dst, int ddt, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        st(dst, ddt, i, ld(src, sdt, i));
}

static void launch_convert(const void* src, int sdt, void* dst, int ddt, int64_t n, cudaStream_t s) {
    convert_kernel<<<grid_for(n, 256), 256, 0, s>>>(src, sdt, dst, ddt, n);
    check_launch("convert");
}

void convert(const Tensor& src, Tensor& dst, cudaStream_t s) {
    if (src.numel() != dst.numel()) throw Error("cuda convert: element counts differ");
    if (src.numel() == 0) return;
    launch_convert(src.data, dt_code(src.dtype, "convert", "src"), dst.data, dt_code(dst.dtype, "convert", "dst"),
                   src.numel(), s);
}

}  // namespace grimoire::cuda
