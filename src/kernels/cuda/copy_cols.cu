// out [R, n] = src [R, C] columns [c0, c0 + n): splitting fused projections (q|gate, q|k|v) without a GEMM.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

static __global__ void copy_cols_kernel(const void* src, int sdt, int64_t C, int64_t c0, void* out, int odt,
                                        int64_t n, int64_t total) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / n, c = i % n;
        st(out, odt, i, ld(src, sdt, r * C + c0 + c));
    }
}

static void launch_copy_cols(const void* src, int sdt, int64_t R, int64_t C, int64_t c0, void* out, int odt,
                             int64_t n, cudaStream_t s) {
    copy_cols_kernel<<<grid_for(R * n, 256), 256, 0, s>>>(src, sdt, C, c0, out, odt, n, R * n);
    check_launch("copy_cols");
}

void copy_cols(const Tensor& src, int64_t c0, Tensor& out, cudaStream_t s) {
    const int64_t n = out.cols();
    if (out.rows() != src.rows() || c0 < 0 || c0 + n > src.cols())
        throw Error("cuda copy_cols: columns [c0, c0 + n) must lie inside src and rows must match");
    if (out.numel() == 0) return;
    launch_copy_cols(src.data, dt_code(src.dtype, "copy_cols", "src"), src.rows(), src.cols(), c0, out.data,
                     dt_code(out.dtype, "copy_cols", "out"), n, s);
}

}  // namespace grimoire::cuda
