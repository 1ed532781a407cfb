// Skinny matmul for decode: y [T, N] = x [T, K] @ w [N, K]^T with T <= 8. Bandwidth-bound on the weight, so
// one warp streams one weight row with 16-byte loads (4 in flight per lane) and applies it to all T inputs;
// x is tiny and stays in L1/L2. BF16 weights take the vector path; other dtypes or K % 8 != 0 a scalar one.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

namespace {
constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;

template <class XT>
__device__ __forceinline__ void load8(const XT* p, float* f);
template <>
__device__ __forceinline__ void load8<float>(const float* p, float* f) {
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
template <>
__device__ __forceinline__ void load8<__nv_bfloat16>(const __nv_bfloat16* p, float* f) {
    load_bf16x8(p, f);
}
}  // namespace

template <int T, class XT>
static __global__ void __launch_bounds__(32 * kWarpsPerBlock) gemv_bf16_kernel(const XT* __restrict__ x,  // [T, K]
                                                                             const __nv_bfloat16* __restrict__ w,  // [N, K]
                                                                             int64_t N, int64_t K,
                                                                             void* __restrict__ y,  // [T, N]
                                                                             int ydt) {
    const int lane = threadIdx.x & 31;
    const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
    if (n >= N) return;
    const __nv_bfloat16* wr = w + n * K;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; ++t) acc[t] = 0.0f;
    constexpr int64_t kStep = 32 * 8;
    int64_t k = lane * 8;
    for (; k + (kUnroll - 1) * kStep < K; k += kUnroll * kStep) {
        float wf[kUnroll][8];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) load8(wr + k + u * kStep, wf[u]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
            for (int t = 0; t < T; ++t) {
                float xf[8];
                load8(x + t * K + k + u * kStep, xf);
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[t] += wf[u][i] * xf[i];
            }
        }
    }
    for (; k < K; k += kStep) {
        float wf[8];
        load8(wr + k, wf);
#pragma unroll
        for (int t = 0; t < T; ++t) {
            float xf[8];
            load8(x + t * K + k, xf);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[t] += wf[i] * xf[i];
        }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
        const float v = warp_sum(acc[t]);
        if (lane == 0) st(y, ydt, t * N + n, v);
    }
}

static __global__ void gemv_generic_kernel(const void* __restrict__ x, int xdt, const void* __restrict__ w, int wdt,
                                           int64_t T, int64_t N, int64_t K, void* __restrict__ y, int ydt) {
    const int lane = threadIdx.x & 31;
    const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
    if (n >= N) return;
    for (int64_t t = 0; t < T; ++t) {
        float acc = 0.0f;
        for (int64_t k = lane; k < K; k += 32) acc += ld(w, wdt, n * K + k) * ld(x, xdt, t * K + k);
        acc = warp_sum(acc);
        if (lane == 0) st(y, ydt, t * N + n, acc);
    }
}

template <class XT>
static void launch_gemv_bf16(const XT* x, const __nv_bfloat16* w, int64_t T, int64_t N, int64_t K, void* y, int ydt,
                             cudaStream_t s) {
    const unsigned grid = static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
    const int threads = 32 * kWarpsPerBlock;
    switch (T) {
        case 1: gemv_bf16_kernel<1, XT><<<grid, threads, 0, s>>>(x, w, N, K, y, ydt); break;
        case 2: gemv_bf16_kernel<2, XT><<<grid, threads, 0, s>>>(x, w, N, K, y, ydt); break;
        case 3: gemv_bf16_kernel<3, XT><<<grid, threads, 0, s>>>(x, w, N, K, y, ydt); break;
        case 4: gemv_bf16_kernel<4, XT><<<grid, threads, 0, s>>>(x, w, N, K, y, ydt); break;
        case 5: gemv_bf16_kernel<5, XT><<<grid, threads, 0, s>>>(x, w, N, K, y, ydt); break;
        case 6: gemv_bf16_kernel<6, XT><<<grid, threads, 0, s>>>(x, w, N, K, y, ydt); break;
        case 7: gemv_bf16_kernel<7, XT><<<grid, threads, 0, s>>>(x, w, N, K, y, ydt); break;
        default: gemv_bf16_kernel<8, XT><<<grid, threads, 0, s>>>(x, w, N, K, y, ydt); break;
    }
    check_launch("gemv");
}

static void launch_gemv_generic(const void* x, int xdt, const void* w, int wdt, int64_t T, int64_t N, int64_t K,
                                void* y, int ydt, cudaStream_t s) {
    const unsigned grid = static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
    gemv_generic_kernel<<<grid, 32 * kWarpsPerBlock, 0, s>>>(x, xdt, w, wdt, T, N, K, y, ydt);
    check_launch("gemv");
}

void gemv(const Tensor& x, const Tensor& w, Tensor& out, cudaStream_t s) {
    const int64_t T = x.rows(), K = x.cols(), N = w.rows();
    if (w.cols() != K || out.rows() != T || out.cols() != N)
        throw Error("cuda gemv: x [T, K], w [N, K], out [T, N] shapes disagree");
    if (T > kGemvMaxT) throw Error("cuda gemv: T > 8");
    if (T == 0 || N == 0) return;
    const int xdt = dt_code(x.dtype, "gemv", "x"), wdt = dt_code(w.dtype, "gemv", "w"),
              ydt = dt_code(out.dtype, "gemv", "out");
    const bool aligned = K % 8 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
    if (wdt == kBF16 && aligned && xdt == kF32)
        launch_gemv_bf16(x.ptr<float>(), w.ptr<__nv_bfloat16>(), T, N, K, out.data, ydt, s);
    else if (wdt == kBF16 && aligned && xdt == kBF16)
        launch_gemv_bf16(x.ptr<__nv_bfloat16>(), w.ptr<__nv_bfloat16>(), T, N, K, out.data, ydt, s);
    else
        launch_gemv_generic(x.data, xdt, w.data, wdt, T, N, K, out.data, ydt, s);
}

}  // namespace grimoire::cuda
