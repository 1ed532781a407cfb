// Random quantized weights on the device in the library's repacked layout, for the GPU benchmarks
// (bench_quant_kernels, probe_decode_chain): packed words and scales filled by the device's counter-based
// generators, so a 27B-sized set takes milliseconds and no host memory. nvcc-compilable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "bench_timing.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant.h"

namespace grimoire::bench {

inline void* dalloc(size_t n) {
    void* p = nullptr;
    check(cudaMalloc(&p, n ? n : 1), "cudaMalloc");
    return p;
}

// Random INT4 (symmetric, group 128, F16 scales) or FP8 (128x128 blocks) weights of [N, K], `copies` of them
// (copy c from seeds 100 + c / 200 + c, FP8 300 + c / 400 + c, shifted by `seed`). Freed with the struct.
struct QWeights {
    std::vector<cuda::Int4Dev> i4;
    std::vector<cuda::Fp8Dev> f8;
    size_t bytes = 0;  // one copy: what a kernel must read
    std::vector<void*> bufs;
    QWeights() = default;
    QWeights(const QWeights&) = delete;
    QWeights& operator=(const QWeights&) = delete;
    ~QWeights() {
        for (void* p : bufs) cudaFree(p);
    }
};

inline void make_weights(QWeights& q, bool fp8, int64_t N, int64_t K, int copies, uint64_t seed = 0) {
    const int64_t NT = (N + 15) / 16, KC = (K + 63) / 64;
    for (int c = 0; c < copies; ++c) {
        if (!fp8) {
            cuda::Int4Dev d;
            d.N = N, d.K = K, d.NT = NT, d.KC = KC, d.G = (K + 127) / 128, d.group_size = 128;
            d.scale_dtype = DType::F16;
            const size_t nw = static_cast<size_t>(NT * KC * 128), ns = static_cast<size_t>(d.G * NT * 16);
            auto* w = static_cast<uint32_t*>(dalloc(nw * 4));
            void* s = dalloc(ns * 2);
            q.bufs.push_back(w), q.bufs.push_back(s);
            cuda::random_bits(w, static_cast<int64_t>(nw), seed + 100 + c, 0xFFFFFFFFu, nullptr);
            cuda::random_fill(s, DType::F16, static_cast<int64_t>(ns), seed + 200 + c, 0.0005f, 0.0015f,
                              nullptr);
            d.words = w, d.scales = s;
            q.i4.push_back(d);
            q.bytes = nw * 4 + ns * 2;
        } else {
            cuda::Fp8Dev d;
            d.N = N, d.K = K, d.NT = NT, d.KC = KC, d.bn = 128, d.bk = 128, d.SN = (N + 127) / 128,
            d.SG = (K + 127) / 128;
            const size_t nw = static_cast<size_t>(NT * KC * 256), ns = static_cast<size_t>(d.SN * d.SG);
            auto* w = static_cast<uint32_t*>(dalloc(nw * 4));
            auto* s = static_cast<float*>(dalloc(ns * 4));
            q.bufs.push_back(w), q.bufs.push_back(s);
            cuda::random_bits(w, static_cast<int64_t>(nw), seed + 300 + c, 0xBFBFBFBFu, nullptr);
            cuda::random_fill(s, DType::F32, static_cast<int64_t>(ns), seed + 400 + c, 0.005f, 0.02f,
                              nullptr);
            d.words = w, d.scales = s;
            q.f8.push_back(d);
            q.bytes = nw * 4 + ns * 4;
        }
    }
    check(cudaDeviceSynchronize(), "fill");
}

}  // namespace grimoire::bench
