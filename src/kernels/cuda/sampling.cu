// Token selection on the device: greedy argmax (ties -> lowest index, as torch.argmax) and temperature /
// top-k / top-p sampling. One block per row. Top-k is found by k rounds of a block-wide argmax over the
// elements ordered after the previous winner ((value desc, index asc)), which needs no sort and no extra
// memory; k <= 64 keeps that to a few passes over the logits.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

namespace {
constexpr int kThreads = 1024;
constexpr int kMaxTopK = 64;

// (v, i) beats (bv, bi) when v is larger, or equal with a lower index.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

// Warp-wide best (value, index); every lane gets it.
__device__ __forceinline__ void warp_best(float& bv, int& bi) {
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(ov, oi, bv, bi)) {
            bv = ov;
            bi = oi;
        }
    }
}

__device__ void block_best(float bv, int bi, float* out_v, int* out_i);

// Block argmax among elements strictly after (pv, pi) in the (value desc, index asc) order.
__device__ void block_argmax_after(const void* row, int dt, int V, float pv, int pi, float* out_v, int* out_i) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = ld(row, dt, i);
        if (v != v) v = -INFINITY;  // NaN never wins
        const bool after = v < pv || (v == pv && i > pi);
        if (after && better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    block_best(bv, bi, out_v, out_i);
}

// The block's best of every thread's (bv, bi) into *out_v, *out_i (index 0 when no element qualified).
__device__ void block_best(float bv, int bi, float* out_v, int* out_i) {
    __shared__ float sv[32];
    __shared__ int si[32];
    warp_best(bv, bi);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x / 32;
        bv = lane < nw ? sv[lane] : -INFINITY;
        bi = lane < nw ? si[lane] : INT_MAX;
        warp_best(bv, bi);
        if (lane == 0) {
            sv[0] = bv;
            si[0] = bi;
        }
    }
    __syncthreads();
    *out_v = sv[0];
    *out_i = si[0] == INT_MAX ? 0 : si[0];
}
}  // namespace

// Greedy decoding's argmax, in the decode step's graph after the lm_head (launch_pdl). BF16 rows of whole
// 16-byte pieces are read a piece per load, each thread's pieces in index order (so the strict `better`
// keeps the lowest index on ties): the scalar loop's 2-byte loads over a 248320-entry row were ~60 dependent
// rounds per thread.
static __global__ void argmax_kernel(const void* logits, int dt, int V, int32_t* out) {
    pdl_enter();
    const void* row = static_cast<const char*>(logits) + static_cast<size_t>(blockIdx.x) * V * (dt == kF32 ? 4 : 2);
    float v;
    int i;
    if (dt == kBF16 && V % 8 == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0) {
        const uint4* p = static_cast<const uint4*>(row);
        float bv = -INFINITY;
        int bi = INT_MAX;
        for (int k = threadIdx.x; k < V / 8; k += blockDim.x) {
            const uint4 u = p[k];
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                float x = __uint_as_float((e & 1 ? w[e >> 1] >> 16 : w[e >> 1] & 0xFFFFu) << 16);
                if (x != x) x = -INFINITY;  // NaN never wins
                if (better(x, 8 * k + e, bv, bi)) bv = x, bi = 8 * k + e;
            }
        }
        block_best(bv, bi, &v, &i);
    } else {
        block_argmax_after(row, dt, V, INFINITY, -1, &v, &i);
    }
    if (threadIdx.x == 0) out[blockIdx.x] = i;
}

static __global__ void sample_kernel(const void* logits, int dt, int V, const float* uniform, float temperature,
                                     int top_k, float top_p, int32_t* out) {
    __shared__ float top_v[kMaxTopK];
    __shared__ int top_i[kMaxTopK];
    const void* row = static_cast<const char*>(logits) + static_cast<size_t>(blockIdx.x) * V * (dt == kF32 ? 4 : 2);
    float pv = INFINITY;
    int pi = -1;
    for (int r = 0; r < top_k; ++r) {
        float v;
        int i;
        block_argmax_after(row, dt, V, pv, pi, &v, &i);
        if (threadIdx.x == 0) {
            top_v[r] = v;
            top_i[r] = i;
        }
        pv = v;
        pi = i;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    // Softmax over the candidates (sorted descending), then the top-p prefix, then inverse-CDF sampling.
    float p[kMaxTopK];
    float sum = 0.0f;
    for (int r = 0; r < top_k; ++r) {
        p[r] = top_v[r] == -INFINITY ? 0.0f : expf((top_v[r] - top_v[0]) / temperature);
        sum += p[r];
    }
    int keep = top_k;
    float cum = 0.0f;
    for (int r = 0; r < top_k; ++r) {
        cum += p[r] / sum;
        if (cum >= top_p) {
            keep = r + 1;
            break;
        }
    }
    float kept = 0.0f;
    for (int r = 0; r < keep; ++r) kept += p[r];
    const float u = uniform[blockIdx.x] * kept;
    float acc = 0.0f;
    int pick = top_i[0];
    for (int r = 0; r < keep; ++r) {
        acc += p[r];
        if (u < acc) {
            pick = top_i[r];
            break;
        }
    }
    out[blockIdx.x] = pick;
}

static void launch_argmax(const void* logits, int dt, int64_t R, int64_t V, int32_t* out, cudaStream_t s) {
    launch_pdl(argmax_kernel, dim3(static_cast<unsigned>(R)), dim3(kThreads), 0, s, logits, dt, static_cast<int>(V), out);
    check_launch("argmax");
}

static void launch_sample(const void* logits, int dt, int64_t R, int64_t V, const float* uniform, float temperature,
                          int top_k, float top_p, int32_t* out, cudaStream_t s) {
    sample_kernel<<<static_cast<unsigned>(R), kThreads, 0, s>>>(logits, dt, static_cast<int>(V), uniform, temperature,
                                                               top_k, top_p, out);
    check_launch("sample");
}

void argmax(const Tensor& logits, Tensor& out, cudaStream_t s) {
    if (out.dtype != DType::I32 || out.numel() != logits.rows()) throw Error("cuda argmax: out must be [R] I32");
    const int dt = dt_code(logits.dtype, "argmax", "logits");
    if (dt == kF16) throw Error("cuda argmax: F16 logits unsupported");
    if (logits.numel() == 0) return;
    launch_argmax(logits.data, dt, logits.rows(), logits.cols(), out.ptr<int32_t>(), s);
}

void sample(const Tensor& logits, const Tensor& uniform, float temperature, int top_k, float top_p, Tensor& out,
            cudaStream_t s) {
    if (out.dtype != DType::I32 || out.numel() != logits.rows()) throw Error("cuda sample: out must be [R] I32");
    if (uniform.dtype != DType::F32 || uniform.numel() != logits.rows())
        throw Error("cuda sample: uniform must be [R] F32");
    if (!(temperature > 0.0f)) throw Error("cuda sample: temperature must be > 0 (use argmax for greedy)");
    if (top_k <= 0 || top_k > kMaxTopK) top_k = kMaxTopK;
    if (top_k > logits.cols()) top_k = static_cast<int>(logits.cols());
    const int dt = dt_code(logits.dtype, "sample", "logits");
    if (dt == kF16) throw Error("cuda sample: F16 logits unsupported");
    if (logits.numel() == 0) return;
    launch_sample(logits.data, dt, logits.rows(), logits.cols(), uniform.ptr<float>(), temperature, top_k,
                  top_p <= 0.0f || top_p > 1.0f ? 1.0f : top_p, out.ptr<int32_t>(), s);
}

}  // namespace grimoire::cuda
