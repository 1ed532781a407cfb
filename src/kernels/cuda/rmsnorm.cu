// Row-wise RMSNorm, plain (w * x̂) or zero-centred ((1 + w) * x̂); fp32 statistics whatever the dtypes.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

static __global__ void rmsnorm_kernel(const void* __restrict__ x,  // [R, D]
                                      int xdt,
                                      const void* __restrict__ w,  // [D]
                                      int wdt, int64_t D, float eps, float w_offset,
                                      void* out,  // [R, D], may alias x
                                      int odt) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    __shared__ float red[32];
    const int64_t base = static_cast<int64_t>(blockIdx.x) * D;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
        const float v = ld(x, xdt, base + c);
        ss += v * v;
    }
    const float r = rsqrtf(block_sum(ss, red) / static_cast<float>(D) + eps);
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x)
        st(out, odt, base + c, ld(x, xdt, base + c) * r * (w_offset + ld(w, wdt, c)));
}

static void launch_rmsnorm(const void* x, int xdt, const void* w, int wdt, int64_t R, int64_t D, float eps,
                           float w_offset, void* out, int odt, cudaStream_t s) {
    const int threads = D >= 1024 ? 512 : (D >= 256 ? 256 : 64);
    launch_pdl(rmsnorm_kernel, dim3(static_cast<unsigned>(R)), dim3(threads), 0, s, x, xdt, w, wdt, D, eps,
               w_offset, out, odt);
    check_launch("rmsnorm");
}

void rmsnorm(const Tensor& x, const Tensor& w, float eps, NormKind kind, Tensor& out, cudaStream_t s) {
    if (w.numel() != x.cols() || out.numel() != x.numel())
        throw Error("cuda rmsnorm: x [R, D], w [D], out [R, D] shapes disagree");
    if (x.rows() == 0) return;
    launch_rmsnorm(x.data, dt_code(x.dtype, "rmsnorm", "x"), w.data, dt_code(w.dtype, "rmsnorm", "w"), x.rows(),
                   x.cols(), eps, kind == NormKind::PLUS_ONE ? 1.0f : 0.0f, out.data,
                   dt_code(out.dtype, "rmsnorm", "out"), s);
}

}  // namespace grimoire::cuda
