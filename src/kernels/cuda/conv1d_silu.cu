// Depthwise causal conv1d (tap K-1 = current token) + SiLU, carrying the last K-1 pre-conv rows in `state`.
// Every (token, channel) output is independent, so one thread each (a long prefill is not serialised over
// tokens); a second tiny kernel then shifts the state, after every output has read the old one. Up to 8 tokens
// (decode, verify) take a single kernel that does both per channel.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

namespace {
constexpr int kMaxK = 8;
}

static __global__ void conv1d_silu_kernel(const void* __restrict__ x,  // [T, C]
                                          int xdt,
                                          const void* __restrict__ w,  // [C, K]
                                          int wdt,
                                          const void* __restrict__ state,  // [K-1, C], oldest row first
                                          int sdt, int64_t T, int64_t C, int K,
                                          void* __restrict__ out,  // [T, C]
                                          int odt, int64_t xs) {  // xs: elements between x rows
    pdl_enter();                                                  // launched through launch_pdl (common.cuh)
    const int64_t n = T * C;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = i / C, c = i % C;
        float acc = 0.0f;
        for (int j = 0; j < K; ++j) {
            const int64_t src = t - (K - 1) + j;  // token index; negative = still in the carried state
            const float v = src >= 0 ? ld(x, xdt, src * xs + c) : ld(state, sdt, (K - 1 + src) * C + c);
            acc += ld(w, wdt, c * K + j) * v;
        }
        st(out, odt, i, acc * sigmoidf_(acc));
    }
}

// state[j] = the (T + j)-th row of [old state ; x]. Ascending j per channel reads row T + j before any
// thread writes it (writes go to j < T + j), so in place is safe.
static __global__ void conv_state_kernel(const void* __restrict__ x, int xdt, void* state, int sdt, int64_t T,
                                         int64_t C, int K, int64_t xs) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= C) return;
    for (int j = 0; j < K - 1; ++j) {
        const int64_t src = T + j;  // index into [old state (K-1 rows) ; x (T rows)]
        const float v = src < K - 1 ? ld(state, sdt, src * C + c) : ld(x, xdt, (src - (K - 1)) * xs + c);
        st(state, sdt, j * C + c, v);
    }
}

// Prompts with BF16 x / out, even C and the models' K = 4: a thread owns 2 channels (one 4-byte load per row,
// a warp reads 128 contiguous bytes) over kConvTile consecutive tokens and slides the last K input rows
// through registers, so each input row is loaded (1 + (K-1)/kConvTile) times instead of K times, and few
// registers keep the SM full of loads in flight (the scalar kernel above ran at ~1/5 of the bandwidth its
// bytes need; 8 channels per thread at 85 registers still left it at 25% occupancy). Same summation order.
constexpr int kConvTile = 16;
template <int K>
static __global__ void __launch_bounds__(256) conv1d_silu_x2_kernel(const __nv_bfloat162* __restrict__ x,  // [T, xs2]
                                                                    const void* __restrict__ w, int wdt,  // [C, K]
                                                                    const void* __restrict__ state,  // [K-1, C]
                                                                    int sdt, int64_t T, int64_t C,
                                                                    __nv_bfloat162* __restrict__ out,  // [T, C/2]
                                                                    int64_t xs2) {  // pairs between x rows
    pdl_enter();  // launched through launch_pdl (common.cuh)
    const int64_t pairs = C / 2;
    const int64_t gi = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (gi >= pairs * ((T + kConvTile - 1) / kConvTile)) return;
    const int64_t cp = gi % pairs, t0 = (gi / pairs) * kConvTile;
    float w0[K], w1[K];
#pragma unroll
    for (int j = 0; j < K; ++j) {
        w0[j] = ld(w, wdt, 2 * cp * K + j);
        w1[j] = ld(w, wdt, (2 * cp + 1) * K + j);
    }
    float2 win[K];  // win[K-1] is the newest row
#pragma unroll
    for (int r = 0; r < kConvTile + K - 1; ++r) {
        const int64_t t = t0 - (K - 1) + r;
#pragma unroll
        for (int j = 0; j + 1 < K; ++j) win[j] = win[j + 1];
        if (t < 0) win[K - 1] = make_float2(ld(state, sdt, (K - 1 + t) * C + 2 * cp), ld(state, sdt, (K - 1 + t) * C + 2 * cp + 1));
        else if (t < T) win[K - 1] = __bfloat1622float2(x[t * xs2 + cp]);
        if (r < K - 1 || t >= T) continue;
        float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
        for (int j = 0; j < K; ++j) {
            a0 += w0[j] * win[j].x;
            a1 += w1[j] * win[j].y;
        }
        out[t * pairs + cp] = __floats2bfloat162_rn(a0 * sigmoidf_(a0), a1 * sigmoidf_(a1));
    }
}

// A few tokens (decode, a verify step: T <= kStepMaxT): thread c slides its channel's last K rows through
// registers over the T tokens and then writes that channel's state, which no other thread reads, so the state
// kernel's separate launch is not needed (at T = 4 the two prompt kernels took 6 us on the H200).
// KT > 0 fixes K at compile time (the models' 4), so the window stays in registers.
constexpr int64_t kStepMaxT = 8;
template <int KT>
static __global__ void conv1d_silu_step_kernel(const void* __restrict__ x, int xdt, const void* __restrict__ w,
                                               int wdt, void* state, int sdt, int64_t T, int64_t C, int k_rt,
                                               void* __restrict__ out, int odt, int64_t xs) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    const int K = KT > 0 ? KT : k_rt;
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= C) return;
    float rows[kMaxK], wc[kMaxK];
    for (int j = 0; j < K; ++j) wc[j] = ld(w, wdt, c * K + j);
    for (int j = 0; j < K - 1; ++j) rows[j] = ld(state, sdt, j * C + c);
    for (int64_t t = 0; t < T; ++t) {
        rows[K - 1] = ld(x, xdt, t * xs + c);
        float acc = 0.0f;
        for (int j = 0; j < K; ++j) acc += wc[j] * rows[j];
        st(out, odt, t * C + c, acc * sigmoidf_(acc));
        for (int j = 0; j + 1 < K; ++j) rows[j] = rows[j + 1];
    }
    for (int j = 0; j < K - 1; ++j) st(state, sdt, j * C + c, rows[j]);
}

static void launch_conv1d_silu(const void* x, int xdt, const void* w, int wdt, void* state, int sdt, int64_t T,
                               int64_t C, int K, void* out, int odt, int64_t xs, cudaStream_t s) {
    if (T <= kStepMaxT) {
        if (K == 4)
            launch_pdl(conv1d_silu_step_kernel<4>, dim3(grid_for(C, 128)), dim3(128), 0, s, x, xdt, w, wdt,
                       state, sdt, T, C, K, out, odt, xs);
        else
            launch_pdl(conv1d_silu_step_kernel<0>, dim3(grid_for(C, 128)), dim3(128), 0, s, x, xdt, w, wdt,
                       state, sdt, T, C, K, out, odt, xs);
        check_launch("conv1d_silu");
        return;
    }
    const bool al4 = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) & 3) == 0;
    if (xdt == kBF16 && odt == kBF16 && K == 4 && C % 2 == 0 && xs % 2 == 0 && al4) {
        const int64_t n = C / 2 * ((T + kConvTile - 1) / kConvTile);
        launch_pdl(conv1d_silu_x2_kernel<4>, dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0, s,
                   static_cast<const __nv_bfloat162*>(x), w, wdt, state, sdt, T, C,
                   static_cast<__nv_bfloat162*>(out), xs / 2);
    } else {
        launch_pdl(conv1d_silu_kernel, dim3(grid_for(T * C, 256)), dim3(256), 0, s, x, xdt, w, wdt, state,
                   sdt, T, C, K, out, odt, xs);
    }
    check_launch("conv1d_silu");
    if (K > 1) {
        launch_pdl(conv_state_kernel, dim3(grid_for(C, 256)), dim3(256), 0, s, x, xdt, state, sdt, T, C, K,
                   xs);
        check_launch("conv1d_silu state");
    }
}

void conv1d_silu(const Tensor& x, const Tensor& w, Tensor& state, Tensor& out, cudaStream_t s, int64_t x_stride) {
    const int64_t C = x.cols(), T = x.rows();
    if (x_stride == 0) x_stride = C;
    if (x_stride < C) throw Error("cuda conv1d_silu: x row stride below its width");
    const int64_t K = w.numel() / (C ? C : 1);
    if (C == 0 || w.numel() != C * K || K < 1 || K > kMaxK)
        throw Error("cuda conv1d_silu: w must be [C, K] with K <= 8 for x [T, C]");
    if (state.numel() != (K - 1) * C || out.numel() != x.numel())
        throw Error("cuda conv1d_silu: state must be [K-1, C] and out [T, C]");
    if (T == 0) return;
    launch_conv1d_silu(x.data, dt_code(x.dtype, "conv1d_silu", "x"), w.data, dt_code(w.dtype, "conv1d_silu", "w"),
                       state.data, dt_code(state.dtype, "conv1d_silu", "state"), T, C, static_cast<int>(K), out.data,
                       dt_code(out.dtype, "conv1d_silu", "out"), x_stride, s);
}

}  // namespace grimoire::cuda
