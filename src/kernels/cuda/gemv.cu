// Skinny matmul for decode: y [T, N] = x [T, K] @ w [N, K]^T with T <= 8. Bandwidth-bound on the weight: a warp
// streams R consecutive weight rows with 16-byte loads and applies each to all T inputs (x is tiny and stays in
// L1/L2). A block of 8 warps covers 8 / WPR row groups, WPR warps splitting a row group's K (summed through
// shared memory): with one warp per row, N = 96 (DeltaNet b | a) was 12 blocks on 132 SMs, ~300 GB/s. R = 2
// rows per warp for T >= 2 halves the x loads per weight byte (at T = 4 they, not the weight, set the speed).
// The output may be several column parts (a stacked projection group, Backend::matmul_split), each its own
// [T, n_i] tensor, so a split needs no second kernel. BF16 weights take the vector path; other dtypes or
// K % 8 != 0 a scalar one.
#include <cuda_runtime_api.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/split_cols.h"

namespace grimoire::cuda {

namespace {
constexpr int kWarpsPerBlock = 8;

// Column parts of the output: columns [c0[i], c0[i + 1]) go to p[i], a dense [T, c0[i + 1] - c0[i]] tensor.
struct GemvOut {
    void* p[kMaxSplitCols];
    int64_t c0[kMaxSplitCols + 1];
    int n;
    int dt;
};

__device__ __forceinline__ void store_out(const GemvOut& o, int64_t t, int64_t col, float v) {
    int i = 0;
    while (i + 1 < o.n && col >= o.c0[i + 1]) ++i;
    st(o.p[i], o.dt, t * (o.c0[i + 1] - o.c0[i]) + col - o.c0[i], v);
}

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

int sm_count() {
    static const int n = [] {
        const int v = device_attr(cudaDevAttrMultiProcessorCount);
        return v > 0 ? v : 1;
    }();
    return n;
}
}  // namespace

template <int T, int R, int WPR, class XT>
static __global__ void __launch_bounds__(32 * kWarpsPerBlock) gemv_bf16_kernel(const XT* __restrict__ x,  // [T, K]
                                                                             const __nv_bfloat16* __restrict__ w,  // [N, K]
                                                                             int64_t N, int64_t K, GemvOut out) {
    pdl_enter();                                   // launched through launch_pdl (common.cuh)
    constexpr int kGroups = kWarpsPerBlock / WPR;  // row groups of R rows per block
    constexpr int kUnroll = R == 1 ? 4 : 2;        // 16-byte weight loads in flight per lane: 4
    constexpr int64_t kStep = 32 * 8 * WPR;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slice = warp % WPR;
    const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kGroups + warp / WPR) * R;
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;
    if (n0 < N) {
        const __nv_bfloat16* wr[R];
#pragma unroll
        for (int r = 0; r < R; ++r) wr[r] = w + (n0 + r < N ? n0 + r : n0) * K;  // a missing last row re-reads n0
        int64_t k = (slice * 32 + lane) * 8;
        for (; k + (kUnroll - 1) * kStep < K; k += kUnroll * kStep) {
            float wf[kUnroll][R][8];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u)
#pragma unroll
                for (int r = 0; r < R; ++r) load8(wr[r] + k + u * kStep, wf[u][r]);
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
                for (int t = 0; t < T; ++t) {
                    float xf[8];
                    load8(x + t * K + k + u * kStep, xf);
#pragma unroll
                    for (int r = 0; r < R; ++r)
#pragma unroll
                        for (int i = 0; i < 8; ++i) acc[r][t] += wf[u][r][i] * xf[i];
                }
            }
        }
        for (; k < K; k += kStep) {
            float wf[R][8];
#pragma unroll
            for (int r = 0; r < R; ++r) load8(wr[r] + k, wf[r]);
#pragma unroll
            for (int t = 0; t < T; ++t) {
                float xf[8];
                load8(x + t * K + k, xf);
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int i = 0; i < 8; ++i) acc[r][t] += wf[r][i] * xf[i];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < T; ++t) acc[r][t] = warp_sum(acc[r][t]);
    if constexpr (WPR == 1) {
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < R; ++r)
                if (n0 + r < N)
#pragma unroll
                    for (int t = 0; t < T; ++t) store_out(out, t, n0 + r, acc[r][t]);
    } else {
        __shared__ float red[kWarpsPerBlock][R * T];
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int t = 0; t < T; ++t) red[warp][r * T + t] = acc[r][t];
        __syncthreads();
        // Thread (group, r, t) adds its row group's WPR slices in slice order.
        const int i = threadIdx.x;
        if (i < kGroups * R * T) {
            const int g = i / (R * T), rt = i % (R * T);
            const int64_t n = (static_cast<int64_t>(blockIdx.x) * kGroups + g) * R + rt / T;
            if (n < N) {
                float v = 0.0f;
#pragma unroll
                for (int s = 0; s < WPR; ++s) v += red[g * WPR + s][rt];
                store_out(out, rt % T, n, v);
            }
        }
    }
}

static __global__ void gemv_generic_kernel(const void* __restrict__ x, int xdt, const void* __restrict__ w, int wdt,
                                           int64_t T, int64_t N, int64_t K, GemvOut out) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    const int lane = threadIdx.x & 31;
    const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
    if (n >= N) return;
    for (int64_t t = 0; t < T; ++t) {
        float acc = 0.0f;
        for (int64_t k = lane; k < K; k += 32) acc += ld(w, wdt, n * K + k) * ld(x, xdt, t * K + k);
        acc = warp_sum(acc);
        if (lane == 0) store_out(out, t, n, acc);
    }
}

namespace {
template <int T, int R, class XT>
void launch_r(const XT* x, const __nv_bfloat16* w, int64_t N, int64_t K, const GemvOut& o, int wpr, cudaStream_t s) {
    const int64_t groups = (N + R - 1) / R;
    const int threads = 32 * kWarpsPerBlock;
    auto grid = [&](int per_block) { return static_cast<unsigned>((groups + per_block - 1) / per_block); };
    switch (wpr) {
        case 1:
            launch_pdl(gemv_bf16_kernel<T, R, 1, XT>, dim3(grid(kWarpsPerBlock)), dim3(threads), 0, s, x, w,
                       N, K, o);
            break;
        case 2:
            launch_pdl(gemv_bf16_kernel<T, R, 2, XT>, dim3(grid(kWarpsPerBlock / 2)), dim3(threads), 0, s, x,
                       w, N, K, o);
            break;
        case 4:
            launch_pdl(gemv_bf16_kernel<T, R, 4, XT>, dim3(grid(kWarpsPerBlock / 4)), dim3(threads), 0, s, x,
                       w, N, K, o);
            break;
        default:
            launch_pdl(gemv_bf16_kernel<T, R, 8, XT>, dim3(grid(1)), dim3(threads), 0, s, x, w, N, K, o);
            break;
    }
}

// R = 2 rows per warp from T = 2 on when the row pairs still give every SM two blocks; then the fewest warps
// per row group (WPR) that give two blocks per SM, as long as each warp keeps at least a 16-byte load per lane.
template <int T, class XT>
void launch_t(const XT* x, const __nv_bfloat16* w, int64_t N, int64_t K, const GemvOut& o, cudaStream_t s) {
    const int64_t want = 2LL * sm_count();
    const int R = T >= 2 && (N / 2 + kWarpsPerBlock - 1) / kWarpsPerBlock >= want ? 2 : 1;
    const int64_t groups = (N + R - 1) / R;
    int wpr = 1;
    while (wpr < kWarpsPerBlock && (groups * wpr + kWarpsPerBlock - 1) / kWarpsPerBlock < want &&
           K >= 2LL * wpr * 256)
        wpr *= 2;
    if (R == 2) launch_r<T, 2>(x, w, N, K, o, wpr, s);
    else launch_r<T, 1>(x, w, N, K, o, wpr, s);
}

template <class XT>
void launch_gemv_bf16(const XT* x, const __nv_bfloat16* w, int64_t T, int64_t N, int64_t K, const GemvOut& o,
                      cudaStream_t s) {
    switch (T) {
        case 1: launch_t<1>(x, w, N, K, o, s); break;
        case 2: launch_t<2>(x, w, N, K, o, s); break;
        case 3: launch_t<3>(x, w, N, K, o, s); break;
        case 4: launch_t<4>(x, w, N, K, o, s); break;
        case 5: launch_t<5>(x, w, N, K, o, s); break;
        case 6: launch_t<6>(x, w, N, K, o, s); break;
        case 7: launch_t<7>(x, w, N, K, o, s); break;
        default: launch_t<8>(x, w, N, K, o, s); break;
    }
    check_launch("gemv");
}

void run_gemv(const Tensor& x, const Tensor& w, const GemvOut& o, cudaStream_t s) {
    const int64_t T = x.rows(), K = x.cols(), N = w.rows();
    if (T > kGemvMaxT) throw Error("cuda gemv: T > 8");
    if (T == 0 || N == 0) return;
    const int xdt = dt_code(x.dtype, "gemv", "x"), wdt = dt_code(w.dtype, "gemv", "w");
    const bool aligned = K % 8 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
    if (wdt == kBF16 && aligned && xdt == kF32) {
        launch_gemv_bf16(x.ptr<float>(), w.ptr<__nv_bfloat16>(), T, N, K, o, s);
    } else if (wdt == kBF16 && aligned && xdt == kBF16) {
        launch_gemv_bf16(x.ptr<__nv_bfloat16>(), w.ptr<__nv_bfloat16>(), T, N, K, o, s);
    } else {
        launch_pdl(gemv_generic_kernel,
                   dim3(static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock)),
                   dim3(32 * kWarpsPerBlock), 0, s, x.data, xdt, w.data, wdt, T, N, K, o);
        check_launch("gemv");
    }
}
}  // namespace

void gemv(const Tensor& x, const Tensor& w, Tensor& out, cudaStream_t s) {
    const int64_t T = x.rows(), K = x.cols(), N = w.rows();
    if (w.cols() != K || out.rows() != T || out.cols() != N)
        throw Error("cuda gemv: x [T, K], w [N, K], out [T, N] shapes disagree");
    GemvOut o{};
    o.p[0] = out.data;
    o.c0[1] = N;
    o.n = 1;
    o.dt = dt_code(out.dtype, "gemv", "out");
    run_gemv(x, w, o, s);
}

void gemv_split(const Tensor& x, const Tensor& w, const Tensor* outs, int n_outs, cudaStream_t s) {
    const int64_t T = x.rows(), K = x.cols(), N = w.rows();
    if (n_outs < 1 || n_outs > kMaxSplitCols) throw Error("cuda gemv_split: 1..8 output parts");
    if (w.cols() != K) throw Error("cuda gemv_split: x [T, K] and w [N, K] disagree on K");
    GemvOut o{};
    o.n = n_outs;
    o.dt = dt_code(outs[0].dtype, "gemv_split", "out");
    for (int i = 0; i < n_outs; ++i) {
        if (outs[i].dtype != outs[0].dtype || outs[i].rows() != T)
            throw Error("cuda gemv_split: output parts must be [T, n_i] of one dtype");
        o.p[i] = outs[i].data;
        o.c0[i + 1] = o.c0[i] + outs[i].cols();
    }
    if (o.c0[n_outs] != N) throw Error("cuda gemv_split: output parts do not cover w's rows");
    run_gemv(x, w, o, s);
}

}  // namespace grimoire::cuda
