// Gated RMSNorm of the Gated DeltaNet output: out = w * (x / rms(x)) * silu(z), rows of D = w.numel().
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

static __global__ void rmsnorm_gated_kernel(const void* __restrict__ x,  // [R, D]
                                            int xdt,
                                            const void* __restrict__ z,  // [R, D]
                                            int zdt,
                                            const void* __restrict__ w,  // [D]
                                            int wdt, int64_t D, float eps,
                                            void* out,  // [R, D], may alias x
                                            int odt) {
    __shared__ float red[32];
    const int64_t base = static_cast<int64_t>(blockIdx.x) * D;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
        const float v = ld(x, xdt, base + c);
        ss += v * v;
    }
    const float r = rsqrtf(block_sum(ss, red) / static_cast<float>(D) + eps);
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
        const float zv = ld(z, zdt, base + c);
        st(out, odt, base + c, ld(w, wdt, c) * ld(x, xdt, base + c) * r * zv * sigmoidf_(zv));
    }
}

static void launch_rmsnorm_gated(const void* x, int xdt, const void* z, int zdt, const void* w, int wdt, int64_t R,
                                 int64_t D, float eps, void* out, int odt, cudaStream_t s) {
    const int threads = D >= 256 ? 256 : (D >= 128 ? 128 : 32);
    rmsnorm_gated_kernel<<<static_cast<unsigned>(R), threads, 0, s>>>(x, xdt, z, zdt, w, wdt, D, eps, out, odt);
    check_launch("rmsnorm_gated");
}

void rmsnorm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& out, cudaStream_t s) {
    const int64_t D = w.numel();
    if (D == 0 || x.numel() % D != 0 || z.numel() != x.numel() || out.numel() != x.numel())
        throw Error("cuda rmsnorm_gated: x, z, out must have the same size, a multiple of w [D]");
    if (x.numel() == 0) return;
    launch_rmsnorm_gated(x.data, dt_code(x.dtype, "rmsnorm_gated", "x"), z.data,
                         dt_code(z.dtype, "rmsnorm_gated", "z"), w.data, dt_code(w.dtype, "rmsnorm_gated", "w"),
                         x.numel() / D, D, eps, out.data, dt_code(out.dtype, "rmsnorm_gated", "out"), s);
}

}  // namespace grimoire::cuda
