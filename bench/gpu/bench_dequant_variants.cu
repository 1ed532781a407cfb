// Variants of the prefill path's dequantization pass (quant_dequant.cuh) on the 27B gate_up and down shapes,
// in one process so that every figure is comparable to the committed kernel measured beside it:
//   * the committed kernel: one warp per 16 x 64 chunk, eight consecutive chunks along K per block;
//   * runs<CPW>: a block covers 8 x CPW consecutive chunks, each warp loads its CPW chunks first (more bytes
//   in
//     flight, fewer blocks) and writes them in order, so a block writes 8 x CPW x 128-byte runs of each row;
//   * rows: a block covers one n-tile's whole K (its 16 output rows are one contiguous region), two chunks in
//     flight per warp.
// Every variant decodes through the same per-chunk device functions and is checked bit for bit against the
// committed kernel's output. Timed: the pass alone (bytes read + written / time against the copy bandwidth),
// and at M = 512 the pass + the cuBLAS BF16 GEMM against that GEMM alone on the same inputs (random x, the
// dequantized weight): bench_quant_kernels' `*_prefill_512_vs_cublas`.
//
//   bench_dequant_variants [--out results.json] [--commit SHA]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant_dequant.cuh"

namespace gc = grimoire::cuda;
namespace dq = grimoire::cuda::dq;
using grimoire::DType;
using grimoire::bench::add_entry;
using grimoire::bench::check;
using grimoire::bench::copy_bandwidth;
using grimoire::bench::time_ms;
using grimoire::bench::write_record_text;

namespace {

using Int4 = dq::Int4Chunks<__half, __nv_bfloat16>;  // F16 scales, BF16 out (the prefill path)
using Fp8 = dq::Fp8Chunks<__nv_bfloat16>;

// runs<CPW>: block b covers chunks [b * 8 * CPW, (b + 1) * 8 * CPW) of the (nt, c) order (c fastest); warp w
// takes chunks b * 8 * CPW + i * 8 + w, so at each step the block's 8 warps write 8 consecutive chunks. Each
// warp loads its CPW chunks first.
template <class F, int CPW>
__global__ void __launch_bounds__(32 * dq::kDqWarps) runs(const typename F::Dev w, __nv_bfloat16* out) {
    __shared__ __align__(16) __nv_bfloat16 tiles[dq::kDqWarps][16 * dq::kTileLd];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t total = w.NT * w.KC, first = static_cast<int64_t>(blockIdx.x) * dq::kDqWarps * CPW + warp;
    typename F::Words q[CPW];
#pragma unroll
    for (int i = 0; i < CPW; ++i) {
        const int64_t ch = first + i * dq::kDqWarps;
        if (ch < total) q[i] = F::words(w, ch / w.KC, ch % w.KC, lane);
    }
#pragma unroll
    for (int i = 0; i < CPW; ++i) {
        const int64_t ch = first + i * dq::kDqWarps;
        if (ch >= total) break;
        F::decode(w, out, tiles[warp], ch / w.KC, ch % w.KC, q[i], lane);
        __syncwarp();  // the tile is rewritten by the next chunk
    }
}

// rows: block nt covers n-tile nt's KC chunks (its 16 output rows are one contiguous region), warp w chunks
// w, w + 8, ...; the next chunk's words are loaded before the current one is decoded.
template <class F>
__global__ void __launch_bounds__(32 * dq::kDqWarps) rows(const typename F::Dev w, __nv_bfloat16* out) {
    __shared__ __align__(16) __nv_bfloat16 tiles[dq::kDqWarps][16 * dq::kTileLd];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t nt = blockIdx.x;
    if (warp >= w.KC) return;
    typename F::Words q = F::words(w, nt, warp, lane);
    for (int64_t c = warp; c < w.KC; c += dq::kDqWarps) {
        const typename F::Words cur = q;
        if (c + dq::kDqWarps < w.KC) q = F::words(w, nt, c + dq::kDqWarps, lane);
        F::decode(w, out, tiles[warp], nt, c, cur, lane);
        __syncwarp();
    }
}

// Count of differing 16-bit words between a and b.
__global__ void count_diff(const uint16_t* a, const uint16_t* b, int64_t n, unsigned long long* d) {
    unsigned long long local = 0;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        local += a[i] != b[i];
    if (local) atomicAdd(d, local);
}

struct Variant {
    std::string name;
    // Launches the variant on weight copy i into out.
    std::function<void(int i, __nv_bfloat16* out)> run;
};

// The committed kernel and the variants for one format; dev(i) is weight copy i.
template <class F>
std::vector<Variant> variants(std::function<typename F::Dev(int)> dev, int64_t NT, int64_t KC) {
    const unsigned threads = 32 * dq::kDqWarps;
    auto grid = [=](int cpw) {
        return static_cast<unsigned>((NT * KC + dq::kDqWarps * cpw - 1) / (dq::kDqWarps * cpw));
    };
    return {{"committed",
             [=](int i, __nv_bfloat16* o) { dq::dequant_kernel<F><<<grid(1), threads>>>(dev(i), o); }},
            {"runs2", [=](int i, __nv_bfloat16* o) { runs<F, 2><<<grid(2), threads>>>(dev(i), o); }},
            {"runs4", [=](int i, __nv_bfloat16* o) { runs<F, 4><<<grid(4), threads>>>(dev(i), o); }},
            {"runs8", [=](int i, __nv_bfloat16* o) { runs<F, 8><<<grid(8), threads>>>(dev(i), o); }},
            {"rows",
             [=](int i, __nv_bfloat16* o) { rows<F><<<static_cast<unsigned>(NT), threads>>>(dev(i), o); }}};
}

}  // namespace

static int run_bench(int argc, char** argv) {
    std::string out_path, commit = "unknown", command = "bench_dequant_variants";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        command += " " + a;
        if (i + 1 < argc && (a == "--out" || a == "--commit")) {
            const std::string v = argv[++i];
            command += " " + v;
            (a == "--out" ? out_path : commit) = v;
        } else {
            std::fprintf(stderr, "usage: bench_dequant_variants [--out FILE] [--commit SHA]\n");
            return 2;
        }
    }
    const double bw = copy_bandwidth();
    std::printf("copy bandwidth (read+write): %.0f GB/s\n", bw / 1e9);
    cublasHandle_t h;
    cublasCreate(&h);
    struct Shape {
        const char* name;
        int64_t N, K;
    };
    const Shape shapes[] = {{"gate_up", 34816, 5120}, {"down", 5120, 17408}};
    constexpr int kM = 512;
    std::string metrics, ratios;
    int mismatches = 0;
    for (bool fp8 : {false, true}) {
        for (const Shape& sh : shapes) {
            const int64_t NT = (sh.N + 15) / 16, KC = (sh.K + 63) / 64, G = (sh.K + 127) / 128;
            const size_t nw = static_cast<size_t>(NT * KC) * (fp8 ? 256 : 128);
            const size_t ns =
                fp8 ? static_cast<size_t>((sh.N + 127) / 128 * G) : static_cast<size_t>(G * NT * 16);
            const size_t in_bytes = nw * 4 + ns * (fp8 ? 4 : 2),
                         out_bytes = static_cast<size_t>(sh.N * sh.K) * 2;
            const int copies = static_cast<int>((400ull << 20) / in_bytes + 1);
            std::vector<gc::Int4Dev> i4(static_cast<size_t>(copies));
            std::vector<gc::Fp8Dev> f8(static_cast<size_t>(copies));
            std::vector<void*> bufs;
            for (int c = 0; c < copies; ++c) {
                void *wp = nullptr, *sp = nullptr;
                check(cudaMalloc(&wp, nw * 4), "cudaMalloc");
                check(cudaMalloc(&sp, ns * (fp8 ? 4 : 2)), "cudaMalloc");
                bufs.push_back(wp), bufs.push_back(sp);
                // FP8 bytes with bit 6 clear: finite values (no NaN encodings).
                gc::random_bits(static_cast<uint32_t*>(wp), static_cast<int64_t>(nw), 100 + c,
                                fp8 ? 0xBFBFBFBFu : 0xFFFFFFFFu, nullptr);
                if (fp8) {
                    gc::random_fill(sp, DType::F32, static_cast<int64_t>(ns), 200 + c, 0.0075f, 0.0125f,
                                    nullptr);
                    gc::Fp8Dev& d = f8[static_cast<size_t>(c)];
                    d.words = static_cast<uint32_t*>(wp), d.scales = static_cast<float*>(sp);
                    d.N = sh.N, d.K = sh.K, d.NT = NT, d.KC = KC, d.bn = 128, d.bk = 128,
                    d.SN = (sh.N + 127) / 128;
                    d.SG = G;
                } else {
                    gc::random_fill(sp, DType::F16, static_cast<int64_t>(ns), 200 + c, 0.0005f, 0.001f,
                                    nullptr);
                    gc::Int4Dev& d = i4[static_cast<size_t>(c)];
                    d.words = static_cast<uint32_t*>(wp), d.scales = sp, d.scale_dtype = DType::F16;
                    d.N = sh.N, d.K = sh.K, d.NT = NT, d.KC = KC, d.G = G, d.group_size = 128;
                }
            }
            __nv_bfloat16 *ref = nullptr, *wd = nullptr, *x = nullptr, *y = nullptr;
            unsigned long long* dcount = nullptr;
            check(cudaMalloc(&ref, out_bytes), "cudaMalloc");
            check(cudaMalloc(&wd, out_bytes), "cudaMalloc");
            check(cudaMalloc(&x, static_cast<size_t>(kM * sh.K) * 2), "cudaMalloc");
            check(cudaMalloc(&y, static_cast<size_t>(kM * sh.N) * 2), "cudaMalloc");
            check(cudaMalloc(&dcount, 8), "cudaMalloc");
            gc::random_fill(x, DType::BF16, kM * sh.K, 7, 1.0f, 0.0f, nullptr);
            std::vector<Variant> vs =
                fp8 ? variants<Fp8>([&](int i) { return f8[static_cast<size_t>(i % copies)]; }, NT, KC)
                    : variants<Int4>([&](int i) { return i4[static_cast<size_t>(i % copies)]; }, NT, KC);
            const float al = 1, be0 = 0;
            auto gemm = [&] {
                cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(sh.N), kM, static_cast<int>(sh.K),
                             &al, wd, CUDA_R_16BF, static_cast<int>(sh.K), x, CUDA_R_16BF,
                             static_cast<int>(sh.K), &be0, y, CUDA_R_16BF, static_cast<int>(sh.N),
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            };
            vs[0].run(0, ref);
            check(cudaMemcpy(wd, ref, out_bytes, cudaMemcpyDeviceToDevice), "copy");
            const double tg = time_ms([&](int) { gemm(); }, 10);  // the anchor: the same inputs as below
            const std::string fmt = fp8 ? "fp8" : "int4";
            std::printf("%s %s: cuBLAS BF16 M=%d %.1f us (%.0f TFLOP/s)\n", fmt.c_str(), sh.name, kM,
                        tg * 1e3, 2.0 * kM * sh.N * sh.K / (tg * 1e-3) / 1e12);
            add_entry(metrics, fmt + "_" + sh.name + "_cublas_" + std::to_string(kM) + "_us", tg * 1e3);
            for (const Variant& v : vs) {
                const std::string tag = fmt + "_" + sh.name + "_" + v.name;
                check(cudaMemset(wd, 0xFF, out_bytes), "memset");
                v.run(0, wd);
                check(cudaMemset(dcount, 0, 8), "memset");
                count_diff<<<1024, 256>>>(reinterpret_cast<const uint16_t*>(wd),
                                          reinterpret_cast<const uint16_t*>(ref), sh.N * sh.K, dcount);
                unsigned long long diff = 0;
                check(cudaMemcpy(&diff, dcount, 8, cudaMemcpyDeviceToHost), tag.c_str());
                mismatches += diff ? 1 : 0;
                const double td = time_ms([&](int i) { v.run(i, wd); }, std::max(20, 2 * copies));
                const double tq = time_ms(
                    [&](int i) {
                        v.run(i, wd);
                        gemm();
                    },
                    10);
                const double r = static_cast<double>(in_bytes + out_bytes) / (td * 1e-3) / bw;
                std::printf(
                    "%s %-8s %-10s pass %7.1f us (%.3f of copy)  pass + GEMM %7.1f us: %.3f of cuBLAS%s\n",
                    fmt.c_str(), sh.name, v.name.c_str(), td * 1e3, r, tq * 1e3, tg / tq,
                    diff ? "  MISMATCH" : "");
                std::fflush(stdout);
                add_entry(metrics, tag + "_us", td * 1e3);
                add_entry(metrics, tag + "_prefill_" + std::to_string(kM) + "_us", tq * 1e3);
                add_entry(ratios, tag + "_bw", r);
                add_entry(ratios, tag + "_prefill_" + std::to_string(kM) + "_vs_cublas", tg / tq);
            }
            for (void* p : bufs) cudaFree(p);
            cudaFree(ref), cudaFree(wd), cudaFree(x), cudaFree(y), cudaFree(dcount);
        }
    }
    cublasDestroy(h);
    if (!out_path.empty()) write_record_text(out_path, commit, command, bw, metrics, ratios);
    if (mismatches) std::printf("%d variants differ from the committed kernel\n", mismatches);
    return mismatches ? 1 : 0;
}

int main(int argc, char** argv) {
    try {
        return run_bench(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_dequant_variants: %s\n", e.what());
        return 1;
    }
}
