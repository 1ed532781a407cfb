// Shared by the quantized-weight GPU tests: a fresh seed per run (printed, so a failure can be replayed),
// random FP8 weights in the canonical host form, a packed device copy for direct cuda::qmm_* calls, and the
// W8A8 oracle of the FP8 prefill path.
#pragma once
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "gpu_test_util.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cuda/quant.h"
#include "quant/quantized.h"
#include "quant/repack.h"

namespace grimoire {

inline uint32_t fresh_seed() {
    const uint32_t s = std::random_device{}();
    std::printf("seed %u\n", s);
    return s;
}

// Random E4M3 codes (no NaN codes) with 128 x 128-block (block) or per-channel scales in [1e-3, 2e-2).
inline Fp8Host random_fp8(int64_t N, int64_t K, bool block, std::mt19937& rng) {
    Fp8Host h;
    h.N = N, h.K = K, h.bn = block ? 128 : 1, h.bk = block ? 128 : K;
    h.w.resize(static_cast<size_t>(N * K));
    for (auto& v : h.w) {
        v = static_cast<uint8_t>(rng());
        if ((v & 0x7F) == 0x7F) v ^= 1;
    }
    h.scales.resize(static_cast<size_t>(((N + h.bn - 1) / h.bn) * ((K + h.bk - 1) / h.bk)));
    std::uniform_real_distribution<float> d(1e-3f, 2e-2f);
    for (auto& s : h.scales) s = d(rng);
    return h;
}

// An INT4 weight's packed device copy and a qmm workspace for direct cuda::qmm_* calls, freed with the object.
struct DirectQmm {
    cuda::Int4Dev d4;
    cuda::QmmWorkspace ws;
    std::vector<void*> owned;
    DirectQmm() = default;
    DirectQmm(const DirectQmm&) = delete;
    DirectQmm& operator=(const DirectQmm&) = delete;
    ~DirectQmm() {
        for (void* p : owned) cudaFree(p);
    }
    void* up(const void* src, size_t bytes) {
        void* d = nullptr;
        EXPECT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
        EXPECT_EQ(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
        owned.push_back(d);
        return d;
    }
    void workspace(int64_t N, int64_t K) {
        size_t pb = 0;
        int nc = 0;
        cuda::qmm_workspace_need(N, K, &pb, &nc);
        ws.partials = static_cast<float*>(up(std::vector<uint8_t>(pb).data(), pb)), ws.partial_bytes = pb;
        ws.counters = static_cast<int*>(up(std::vector<int>(static_cast<size_t>(nc)).data(), static_cast<size_t>(nc) * 4));
        ws.n_counters = nc;
    }
    void int4(const Int4Host& h) {
        const PackedInt4 p = repack_int4(h);
        d4.N = p.N, d4.K = p.K, d4.G = p.G, d4.group_size = p.group_size, d4.NT = p.NT, d4.KC = p.KC;
        d4.scale_dtype = p.scale_type == ScaleType::F16    ? DType::F16
                         : p.scale_type == ScaleType::BF16 ? DType::BF16
                                                           : DType::F32;
        d4.words = static_cast<const uint32_t*>(up(p.words.data(), p.words.size() * 4));
        d4.scales = up(p.scales.data(), p.scales.size());
        d4.zeros = p.zeros.empty() ? nullptr : static_cast<const uint8_t*>(up(p.zeros.data(), p.zeros.size()));
        d4.perm = p.perm.empty() ? nullptr : static_cast<const int32_t*>(up(p.perm.data(), p.perm.size() * 4));
        workspace(h.N, h.K);
    }
    // x [M, K] BF16 on the device (the values xv, already BF16-exact).
    Tensor x_bf16(const std::vector<float>& xv, int64_t M, int64_t K) {
        std::vector<uint16_t> xb(xv.size());
        for (size_t i = 0; i < xv.size(); ++i) xb[i] = f32_to_bf16(xv[i]);
        return Tensor(up(xb.data(), xb.size() * 2), DType::BF16, Device::CUDA, {M, K});
    }
};

// BF16-exact activations with a different magnitude per 128-channel block (1e-3 .. 1e2).
inline std::vector<float> blocky_x(int64_t M, int64_t K, std::mt19937& rng) {
    std::vector<float> x = test::rand_bf16(static_cast<size_t>(M * K), rng());
    std::uniform_real_distribution<float> e(-3.0f, 2.0f);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t b = 0; b < K / 128; ++b) {
            const float mag = std::pow(10.0f, e(rng));
            for (int64_t k = b * 128; k < (b + 1) * 128; ++k) {
                float& v = x[static_cast<size_t>(m * K + k)];
                v = bf16_to_f32(f32_to_bf16(v * mag));
            }
        }
    return x;
}

// fp64 y = x_q w^T over the oracle's dequantized activations, and sum|w x| per output.
inline void w8a8_oracle(const std::vector<float>& xv, const std::vector<float>& w, int64_t M, int64_t N, int64_t K,
                        std::vector<double>& want, std::vector<double>& mag) {
    std::vector<uint8_t> q(xv.size());
    std::vector<float> s(static_cast<size_t>(M * (K / 128))), xd(xv.size());
    cpu::quantize_act_fp8(xv.data(), M, K, 128, q.data(), s.data());
    for (size_t i = 0; i < xv.size(); ++i) {
        const size_t m = i / static_cast<size_t>(K), k = i % static_cast<size_t>(K);
        xd[i] = fp8_e4m3_to_f32(q[i]) * s[m * static_cast<size_t>(K / 128) + k / 128];
    }
    test::host_matmul(xd, w, M, N, K, want, mag);
}

}  // namespace grimoire
