// Residual add + RMSNorm in one kernel (Backend::add_rmsnorm): x += y is stored rounded to x's dtype and the
// norm reads those rounded values, as the unfused add then rmsnorm would. One block per row.
#include <cstdlib>

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
    pdl_enter();  // launched through launch_pdl (common.cuh)
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

// The decode path (BF16 activations, F32 weight, D a multiple of 8 up to 8192): thread i owns elements
// [8i, 8i + 8) of the row, loaded and stored as 16-byte vectors, and keeps them in registers between the sum
// and the scaling, so the op is one round trip to memory. (The loop above stores x between loads, which keeps
// them from overlapping: a 5120-wide row took ten dependent round trips per pass.)
static __global__ void __launch_bounds__(1024) add_rmsnorm_bf16x8_kernel(__nv_bfloat16* x,  // [R, D], updated
                                                                         const __nv_bfloat16* __restrict__ y,
                                                                         const float* __restrict__ w,  // [D]
                                                                         int64_t D, float eps, float w_offset,
                                                                         __nv_bfloat16* out,  // [R, D]
                                                                         int ahead) {
    __shared__ float red[32];
    const int64_t base = static_cast<int64_t>(blockIdx.x) * D, c = 8 * static_cast<int64_t>(threadIdx.x);
    const bool on = c < D;
    float v[8], wf[8], xf[8];
    float ss = 0.0f;
    // The norm weight, and with `ahead` the residual x too, before the programmatic-launch wait: with ahead the
    // caller is the decoder stack (CudaBackend::linear_follows), whose residual was last written by the previous
    // add + RMSNorm, several kernels back and complete before this kernel's predecessor passed its own wait;
    // only y comes from the predecessor. (After the wait they were one round trip with y, the weight often
    // from HBM.)
    auto load_xw = [&] {
        load_bf16x8(x + base + c, xf);
        const float4 w0 = *reinterpret_cast<const float4*>(w + c), w1 = *reinterpret_cast<const float4*>(w + c + 4);
        wf[0] = w0.x; wf[1] = w0.y; wf[2] = w0.z; wf[3] = w0.w;
        wf[4] = w1.x; wf[5] = w1.y; wf[6] = w1.z; wf[7] = w1.w;
    };
    if (on && ahead) load_xw();
    pdl_enter_ahead(ahead);  // launched through launch_pdl (common.cuh)
    if (on) {
        float yf[8];
        if (!ahead) load_xw();
        load_bf16x8(y + base + c, yf);
        uint4 packed;
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
            h[e / 2] = __floats2bfloat162_rn(xf[e] + yf[e], xf[e + 1] + yf[e + 1]);
            const float2 r = __bfloat1622float2(h[e / 2]);
            v[e] = r.x;
            v[e + 1] = r.y;
            ss += r.x * r.x + r.y * r.y;
        }
        *reinterpret_cast<uint4*>(x + base + c) = packed;
    }
    const float r = rsqrtf(block_sum(ss, red) / static_cast<float>(D) + eps);
    if (on) {
        uint4 packed;
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
        for (int e = 0; e < 8; e += 2)
            h[e / 2] = __floats2bfloat162_rn(v[e] * r * (w_offset + wf[e]), v[e + 1] * r * (w_offset + wf[e + 1]));
        *reinterpret_cast<uint4*>(out + base + c) = packed;
    }
}

// Prompt-sized calls (many rows, same operand conditions): 128 threads per row, each owning NV 16-byte vectors
// of it (vector v of thread i at element 8 (i + 128 v)), all of a thread's loads issued before the first use.
// The x + y row is kept packed in registers (it is rounded to BF16 anyway) and w is read in the second pass.
// Against the 640-thread block above at D = 5120: a 512-row call fits the GPU in one wave (4-warp blocks, ~4
// per SM, instead of 20-warp blocks at 3 per SM, 1.3 waves) with 10 loads in flight per thread instead of 2.
constexpr int kRowThreads = 128;
template <int NV>
static __global__ void __launch_bounds__(kRowThreads) add_rmsnorm_rows_kernel(__nv_bfloat16* x,  // [R, D], updated
                                                                              const __nv_bfloat16* __restrict__ y,
                                                                              const float* __restrict__ w,  // [D]
                                                                              int64_t D, float eps, float w_offset,
                                                                              __nv_bfloat16* out) {  // [R, D]
    pdl_enter();  // launched through launch_pdl (common.cuh)
    __shared__ float red[32];
    const int64_t base = static_cast<int64_t>(blockIdx.x) * D;
    uint4 xv[NV], yv[NV];
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        const int64_t c = 8 * (threadIdx.x + static_cast<int64_t>(kRowThreads) * v);
        if (c < D) {
            xv[v] = *reinterpret_cast<const uint4*>(x + base + c);
            yv[v] = *reinterpret_cast<const uint4*>(y + base + c);
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        const int64_t c = 8 * (threadIdx.x + static_cast<int64_t>(kRowThreads) * v);
        if (c >= D) continue;
        ss += add_bf16x8_sumsq(xv[v], yv[v]);
        *reinterpret_cast<uint4*>(x + base + c) = xv[v];
    }
    const float r = rsqrtf(block_sum(ss, red) / static_cast<float>(D) + eps);
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        const int64_t c = 8 * (threadIdx.x + static_cast<int64_t>(kRowThreads) * v);
        if (c >= D) continue;
        const float4 w0 = *reinterpret_cast<const float4*>(w + c), w1 = *reinterpret_cast<const float4*>(w + c + 4);
        const float wf[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        const __nv_bfloat162* xh = reinterpret_cast<const __nv_bfloat162*>(&xv[v]);
        uint4 packed;
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 a = __bfloat1622float2(xh[e]);
            h[e] = __floats2bfloat162_rn(a.x * r * (w_offset + wf[2 * e]), a.y * r * (w_offset + wf[2 * e + 1]));
        }
        *reinterpret_cast<uint4*>(out + base + c) = packed;
    }
}

template <int NV>
static void launch_rows(Tensor& x, const Tensor& y, const Tensor& w, float eps, float w_offset, Tensor& out,
                        cudaStream_t s) {
    launch_pdl(add_rmsnorm_rows_kernel<NV>, dim3(static_cast<unsigned>(x.rows())), dim3(kRowThreads), 0, s,
               x.ptr<__nv_bfloat16>(), y.ptr<__nv_bfloat16>(), w.ptr<float>(), x.cols(), eps, w_offset,
               out.ptr<__nv_bfloat16>());
}

// Rows from which the row kernel runs; GRIMOIRE_ADD_RMSNORM_ROWS=0 keeps the one-vector kernel (before / after).
constexpr int64_t kRowsMin = 16;
static bool rows_path_on() {
    static const bool on = [] {
        const char* e = std::getenv("GRIMOIRE_ADD_RMSNORM_ROWS");
        return !(e && e[0] == '0');
    }();
    return on;
}

void add_rmsnorm(Tensor& x, const Tensor& y, const Tensor& w, float eps, NormKind kind, Tensor& out, cudaStream_t s,
                 bool ahead) {
    if (w.numel() != x.cols() || y.numel() != x.numel() || out.numel() != x.numel())
        throw Error("cuda add_rmsnorm: x, y [R, D], w [D], out [R, D] shapes disagree");
    if (x.rows() == 0) return;
    const char* op = "add_rmsnorm";
    const int64_t D = x.cols();
    auto a16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (x.dtype == DType::BF16 && y.dtype == DType::BF16 && out.dtype == DType::BF16 && w.dtype == DType::F32 &&
        D % 8 == 0 && D <= 8 * 1024 && a16(x.data) && a16(y.data) && a16(out.data) && a16(w.data)) {
        const float w_offset = kind == NormKind::PLUS_ONE ? 1.0f : 0.0f;
        // Many rows: the row kernel (decode's single rows keep the one-vector-per-thread kernel).
        if (x.rows() >= kRowsMin && rows_path_on()) {
            const int64_t nv = (D / 8 + kRowThreads - 1) / kRowThreads;
            switch (nv) {
                case 1: launch_rows<1>(x, y, w, eps, w_offset, out, s); break;
                case 2: launch_rows<2>(x, y, w, eps, w_offset, out, s); break;
                case 3: launch_rows<3>(x, y, w, eps, w_offset, out, s); break;
                case 4: launch_rows<4>(x, y, w, eps, w_offset, out, s); break;
                case 5: launch_rows<5>(x, y, w, eps, w_offset, out, s); break;
                case 6: launch_rows<6>(x, y, w, eps, w_offset, out, s); break;
                case 7: launch_rows<7>(x, y, w, eps, w_offset, out, s); break;
                default: launch_rows<8>(x, y, w, eps, w_offset, out, s); break;
            }
            check_launch(op);
            return;
        }
        const int threads = static_cast<int>((D / 8 + 31) / 32 * 32);
        launch_pdl(add_rmsnorm_bf16x8_kernel, dim3(static_cast<unsigned>(x.rows())), dim3(threads), 0, s,
                   x.ptr<__nv_bfloat16>(), y.ptr<__nv_bfloat16>(), w.ptr<float>(), D, eps,
                   kind == NormKind::PLUS_ONE ? 1.0f : 0.0f, out.ptr<__nv_bfloat16>(), ahead ? 1 : 0);
        check_launch(op);
        return;
    }
    const int threads = D >= 1024 ? 512 : (D >= 256 ? 256 : 64);
    launch_pdl(add_rmsnorm_kernel, dim3(static_cast<unsigned>(x.rows())), dim3(threads), 0, s, x.data,
               dt_code(x.dtype, op, "x"), y.data, dt_code(y.dtype, op, "y"), w.data,
               dt_code(w.dtype, op, "w"), D, eps, kind == NormKind::PLUS_ONE ? 1.0f : 0.0f, out.data,
               dt_code(out.dtype, op, "out"));
    check_launch(op);
}

}  // namespace grimoire::cuda
