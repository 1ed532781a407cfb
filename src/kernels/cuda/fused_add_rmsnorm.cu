// Residual add + RMSNorm in one pass (Backend::add_rmsnorm): x += y is stored rounded to x's dtype and the
// norm reads those rounded values, as the unfused add then rmsnorm would. One block per row.
#include "kernels/cuda/fused_util.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

static __global__ void add_rmsnorm_kernel(void* x,  // [R, D], updated
                                          int xdt,
                                          const void* __restrict__ y,  // [R, D]
                                          int ydt,
                                          const void* __restrict__ w,  // [D]
                                          int wdt, int64_t D, float eps, float w_offset,
                                          void* out,  // [R, D]
                                          int odt) {
    __shared__ float red[32];
    const int64_t base = static_cast<int64_t>(blockIdx.x) * D;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
        const float v = round_as(xdt, ld(x, xdt, base + c) + ld(y, ydt, base + c));
        st(x, xdt, base + c, v);
        ss += v * v;
    }
    const float r = rsqrtf(block_sum(ss, red) / static_cast<float>(D) + eps);
    // Each thread re-reads only the elements it wrote itself, so no barrier is needed (out may alias x).
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x)
        st(out, odt, base + c, ld(x, xdt, base + c) * r * (w_offset + ld(w, wdt, c)));
}

void add_rmsnorm(Tensor& x, const Tensor& y, const Tensor& w, float eps, NormKind kind, Tensor& out, cudaStream_t s) {
    if (w.numel() != x.cols() || y.numel() != x.numel() || out.numel() != x.numel())
        throw Error("cuda add_rmsnorm: x, y [R, D], w [D], out [R, D] shapes disagree");
    if (x.rows() == 0) return;
    const char* op = "add_rmsnorm";
    const int64_t D = x.cols();
    const int threads = D >= 1024 ? 512 : (D >= 256 ? 256 : 64);
    add_rmsnorm_kernel<<<static_cast<unsigned>(x.rows()), threads, 0, s>>>(
        x.data, dt_code(x.dtype, op, "x"), y.data, dt_code(y.dtype, op, "y"), w.data, dt_code(w.dtype, op, "w"), D,
        eps, kind == NormKind::PLUS_ONE ? 1.0f : 0.0f, out.data, dt_code(out.dtype, op, "out"));
    check_launch(op);
}

}  // namespace grimoire::cuda
