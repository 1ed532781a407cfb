// Rotary embedding in place on x [T, H, D]; positions come from device memory, so a captured decode graph
// rotates by the current position at every replay. inv_freq travels in the kernel arguments (<= 256 values).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

namespace {
constexpr int kMaxHalf = 256;
struct RopeArgs {
    float inv_freq[kMaxHalf];
    int half;
    int neox;
    float attn_factor;
};
}  // namespace

static __global__ void rope_kernel(void* x,  // [T, H, D]
                                   int xdt, int64_t H, int64_t D,
                                   const int32_t* __restrict__ positions,  // [T]
                                   RopeArgs a) {
    const int64_t t = blockIdx.y;
    // The angle is pos * inv_freq in fp32 like the reference; sincosf (not the fast intrinsic) keeps large
    // angles accurate.
    const float pos = static_cast<float>(positions[t]);
    const int64_t n = H * a.half;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t h = i / a.half;
        const int f = static_cast<int>(i % a.half);
        float sn, cs;
        sincosf(pos * a.inv_freq[f], &sn, &cs);
        cs *= a.attn_factor;
        sn *= a.attn_factor;
        const int64_t base = (t * H + h) * D;
        const int64_t i0 = base + (a.neox ? f : 2 * f), i1 = base + (a.neox ? f + a.half : 2 * f + 1);
        const float u = ld(x, xdt, i0), v = ld(x, xdt, i1);
        st(x, xdt, i0, u * cs - v * sn);
        st(x, xdt, i1, v * cs + u * sn);
    }
}

static void launch_rope(void* x, int xdt, int64_t T, int64_t H, int64_t D, const int32_t* positions,
                        const RopeArgs& a, cudaStream_t s) {
    const int64_t n = H * a.half;
    dim3 grid(grid_for(n, 128), static_cast<unsigned>(T));
    rope_kernel<<<grid, 128, 0, s>>>(x, xdt, H, D, positions, a);
    check_launch("rope");
}

void rope(Tensor& x, const Tensor& positions, const RopeParams& p, cudaStream_t s) {
    if (x.ndim != 3) throw Error("cuda rope: x must be [T, H, D]");
    if (positions.dtype != DType::I32 || positions.numel() != x.dim(0))
        throw Error("cuda rope: positions must be [T] I32");
    const int half = p.rot_dim / 2;
    if (p.rot_dim % 2 != 0 || p.rot_dim > x.dim(2) || half > kMaxHalf ||
        static_cast<int>(p.inv_freq.size()) != half)
        throw Error("cuda rope: rot_dim " + std::to_string(p.rot_dim) + " does not fit head_dim " +
                    std::to_string(x.dim(2)) + " / inv_freq");
    if (x.numel() == 0 || half == 0) return;
    RopeArgs a{};
    for (int i = 0; i < half; ++i) a.inv_freq[i] = p.inv_freq[static_cast<size_t>(i)];
    a.half = half;
    a.neox = p.neox ? 1 : 0;
    a.attn_factor = p.attn_factor;
    launch_rope(x.data, dt_code(x.dtype, "rope", "x"), x.dim(0), x.dim(1), x.dim(2), positions.ptr<int32_t>(), a,
                s);
}

}  // namespace grimoire::cuda
