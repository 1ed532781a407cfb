// Launchers of the dequantization kernels (quant_dequant.cuh) for the prefill path, the FP8 weight's unpacking to
// its checkpoint layout (the W8A8 prefill GEMM's operand), and the random-bits fill used by --random-weights for
// packed layers.
#include "kernels/cuda/quant_dequant.cuh"

namespace grimoire::cuda {

using dq::dequant_kernel;
using dq::kDqWarps;

namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void random_bits_kernel(uint32_t* p, int64_t n, uint64_t seed, uint32_t mask) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        p[i] = static_cast<uint32_t>(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(i))) >> 16) & mask;
}

// One warp per chunk, chunks along K first within an n-tile (dequant_kernel's order: a block writes 512-byte runs
// of its 16 rows).
__global__ void __launch_bounds__(32 * kDqWarps) unpack_fp8_kernel(const Fp8Dev w, uint8_t* __restrict__ out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kDqWarps + warp;
    if (chunk >= w.NT * w.KC) return;
    const int64_t nt = chunk / w.KC, c = chunk - nt * w.KC;
    dq::unpack_fp8_chunk(w, out, nt, c, dq::fp8_chunk_words(w, nt, c, lane), lane);
}

}  // namespace

template <class OT>
void launch_dequant_int4(const Int4Dev& w, OT* o, cudaStream_t s) {
    const unsigned grid = static_cast<unsigned>((w.NT * w.KC + kDqWarps - 1) / kDqWarps);
    switch (w.scale_dtype) {
        case DType::F16:
            dequant_kernel<dq::Int4Chunks<__half, OT>><<<grid, 32 * kDqWarps, 0, s>>>(w, o);
            break;
        case DType::BF16:
            dequant_kernel<dq::Int4Chunks<__nv_bfloat16, OT>><<<grid, 32 * kDqWarps, 0, s>>>(w, o);
            break;
        case DType::F32:
            dequant_kernel<dq::Int4Chunks<float, OT>><<<grid, 32 * kDqWarps, 0, s>>>(w, o);
            break;
        default:
            throw Error("cuda dequant_int4: scales must be F16, BF16 or F32");
    }
}

void dequant_int4(const Int4Dev& w, void* out, DType out_dtype, cudaStream_t s) {
    if (w.NT * w.KC == 0) return;
    if (out_dtype == DType::F32)
        launch_dequant_int4(w, static_cast<float*>(out), s);
    else if (out_dtype == DType::BF16)
        launch_dequant_int4(w, static_cast<__nv_bfloat16*>(out), s);
    else
        throw Error("cuda dequant_int4: output must be BF16 or F32");
    check_launch("dequant_int4");
}

void dequant_fp8(const Fp8Dev& w, void* out, DType out_dtype, cudaStream_t s) {
    if (w.NT * w.KC == 0) return;
    const unsigned grid = static_cast<unsigned>((w.NT * w.KC + kDqWarps - 1) / kDqWarps);
    if (out_dtype == DType::F32)
        dequant_kernel<dq::Fp8Chunks<float>><<<grid, 32 * kDqWarps, 0, s>>>(w, static_cast<float*>(out));
    else if (out_dtype == DType::BF16)
        dequant_kernel<dq::Fp8Chunks<__nv_bfloat16>>
            <<<grid, 32 * kDqWarps, 0, s>>>(w, static_cast<__nv_bfloat16*>(out));
    else
        throw Error("cuda dequant_fp8: output must be BF16 or F32");
    check_launch("dequant_fp8");
}

void unpack_fp8(const Fp8Dev& w, uint8_t* out, cudaStream_t s) {
    if (w.K % 128 != 0 || !chunk_permuted(w.bk, w.SG) || (reinterpret_cast<uintptr_t>(out) & 15) != 0)
        throw Error("cuda unpack_fp8: needs K % 128 == 0, scale blocks of whole chunks and a 16-byte aligned output "
                    "(K " + std::to_string(w.K) + ", bk " + std::to_string(w.bk) + ")");
    if (w.NT * w.KC == 0) return;
    const unsigned grid = static_cast<unsigned>((w.NT * w.KC + kDqWarps - 1) / kDqWarps);
    unpack_fp8_kernel<<<grid, 32 * kDqWarps, 0, s>>>(w, out);
    check_launch("unpack_fp8");
}

void random_bits(uint32_t* p, int64_t n, uint64_t seed, uint32_t mask, cudaStream_t s) {
    if (n == 0) return;
    const int64_t blocks = (n + 255) / 256;
    random_bits_kernel<<<static_cast<unsigned>(blocks > 8192 ? 8192 : blocks), 256, 0, s>>>(p, n, seed, mask);
    check_launch("random_bits");
}

}  // namespace grimoire::cuda
