// Device helpers shared by the CUDA kernels: dtype-generic loads/stores (activations may be BF16 or F32,
// small parameter vectors F32 or BF16), warp/block reductions, and the launch-error check.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cuda/l2_prefetch.h"

namespace grimoire::cuda {

// The dtype codes kernels branch on (uniform per launch, so the branch costs nothing measurable).
enum : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

inline int dt_code(DType t, const char* op, const char* arg) {
    switch (t) {
        case DType::F32: return kF32;
        case DType::BF16: return kBF16;
        case DType::F16: return kF16;
        default: break;
    }
    throw Error(std::string("cuda ") + op + ": " + arg + " has unsupported dtype " + std::string(dtype_name(t)));
}

__device__ __forceinline__ float ld(const void* p, int dt, int64_t i) {
    if (dt == kBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    if (dt == kF16) return __half2float(static_cast<const __half*>(p)[i]);
    return static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void st(void* p, int dt, int64_t i, float v) {
    if (dt == kBF16) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
    else if (dt == kF16) static_cast<__half*>(p)[i] = __float2half(v);
    else static_cast<float*>(p)[i] = v;
}

// Programmatic dependent launch (Hopper). A kernel launched through launch_pdl may start while its
// predecessor in the stream still runs: it calls pdl_enter() before touching memory, which waits until the
// predecessor has completed and its writes are visible (at once without the launch attribute or below sm_90)
// and then lets the kernel's own dependents launch. A decode step is a chain of such kernels and of the
// quantized GEMMs (qmm.cu, which prefetch their first weights before the wait), so each kernel is resident
// and waiting when its predecessor ends instead of being launched then. Measured on the 27B decode step:
// -0.15 to -0.2 ms of ~8-10 (docs/BENCHMARKS.md, session 6). GRIMOIRE_PDL=0 launches them plainly.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}
// pdl_enter for a kernel whose dependent may launch before it waits (`ahead`, uniform per launch): the caller
// promises that the dependent reads, before its own griddepcontrol.wait, nothing that a kernel before this
// one writes (the layer's next projection, which loads only weights there: Backend::linear_follows). That
// wait returns only once this kernel, hence its predecessor, has completed, so what the dependent reads after
// it is as before. The dependent's blocks then take the SMs this kernel and its predecessor leave idle and
// start their weight loads while the predecessor's last blocks still run.
__device__ __forceinline__ void pdl_enter_ahead(int ahead) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (ahead) asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (!ahead) asm volatile("griddepcontrol.launch_dependents;");
#else
    (void)ahead;
#endif
}
// Launch-ahead (pdl_enter_ahead) where the caller allows it: on with PDL unless GRIMOIRE_PDL_AHEAD=0 (the
// A/B).
bool pdl_ahead_enabled();
// The current device is compute capability 9 or later (cached at the first call;
// src/backend/cuda/cuda_util.cpp).
bool device_is_hopper();
// On for compute capability 9+ unless GRIMOIRE_PDL=0.
bool pdl_enabled();
// A launch with the programmatic-launch attribute when `pdl` (the kernel must then wait on the device before
// reading its predecessor's results: pdl_enter(), or griddepcontrol.wait where it prefetches first).
template <class... P, class... A>
inline void launch_pdl_if(bool pdl, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                          A&&... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}
template <class... P, class... A>
inline void launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A&&... args) {
    launch_pdl_if(pdl_enabled(), kernel, grid, block, smem, s, std::forward<A>(args)...);
}

// Block `part` of `parts` asks L2 for its share of pf's ranges (kernels.h L2Prefetch): 64 KB pieces dealt out
// to the blocks in turn, bulk prefetches issued by thread 0, nothing waited on. sm_90 (a no-op below).
__device__ __forceinline__ void l2_prefetch_share(const L2Prefetch& pf, int part, int parts) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0) return;
    constexpr uint32_t kPiece = 64 * 1024;
    int i = 0;  // the piece's index over all ranges
    for (int r = 0; r < pf.n && r < kL2PrefetchRanges; ++r) {
        const char* base = static_cast<const char*>(pf.p[r]);
        for (uint32_t off = 0; off < pf.bytes[r]; off += kPiece, ++i) {
            if (i % parts != part) continue;
            const uint32_t n = pf.bytes[r] - off < kPiece ? pf.bytes[r] - off : kPiece;
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + off), "r"(n) : "memory");
        }
    }
#else
    (void)pf, (void)part, (void)parts;
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* red /* [32] shared */) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = lane < nw ? red[lane] : 0.0f;
    return warp_sum(s);
}

// Eight consecutive BF16 values (16-byte aligned) as fp32: one 128-bit load.
__device__ __forceinline__ void load_bf16x8(const __nv_bfloat16* p, float* f) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 t = __bfloat1622float2(h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + __expf(-x)); }

// add_rmsnorm's first pass on one 16-byte vector of 8 BF16 values: x = bf16(x + y) in place; returns the sum of
// the squares of the rounded sums in fp32 (shared by the row kernel and the fused MLP block's pre-norm, whose
// residual must come out bit for bit the same).
__device__ __forceinline__ float add_bf16x8_sumsq(uint4& x, const uint4& y) {
    __nv_bfloat162* xh = reinterpret_cast<__nv_bfloat162*>(&x);
    const __nv_bfloat162* yh = reinterpret_cast<const __nv_bfloat162*>(&y);
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float2 a = __bfloat1622float2(xh[e]), b = __bfloat1622float2(yh[e]);
        xh[e] = __floats2bfloat162_rn(a.x + b.x, a.y + b.y);
        const float2 r = __bfloat1622float2(xh[e]);
        ss += r.x * r.x + r.y * r.y;
    }
    return ss;
}

// c [16x8] f32 += a [16x16] bf16 (row) * b [16x8] bf16 (col): mma.sync m16n8k16, registers as PTX's fragments.
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One attribute of the current device (0 when the query fails); callers cache it in a function-local static.
inline int device_attr(cudaDeviceAttr what) {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, what, dev);
    return v;
}

inline unsigned grid_for(int64_t n, int threads) {
    int64_t g = (n + threads - 1) / threads;
    return static_cast<unsigned>(g < 1 ? 1 : (g > 65535LL * 32 ? 65535LL * 32 : g));
}

void check_launch(const char* op);  // throws Error naming the op when the last launch failed

}  // namespace grimoire::cuda
