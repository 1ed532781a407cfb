// Helpers for the GPU tests: a CudaBackend when a device is present (tests GTEST_SKIP otherwise), bf16-exact
// random inputs so the CPU oracle and the GPU see identical values, and a tolerance check that reports the
// worst element.
#pragma once
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"

namespace grimoire::test {

inline bool have_gpu() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return n > 0;
}

#define GRIMOIRE_REQUIRE_GPU()                                               \
    do {                                                                     \
        if (!::grimoire::test::have_gpu()) GTEST_SKIP() << "no CUDA device"; \
    } while (0)

// Uniform values in [lo, hi), rounded to bf16 so that bf16 and f32 copies hold the same numbers.
inline std::vector<float> rand_bf16(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = bf16_to_f32(f32_to_bf16(d(rng)));
    return v;
}

inline Tensor put(Backend& be, const std::vector<float>& v, DType dt, std::initializer_list<int64_t> shape) {
    if (dt == DType::F32) return be.upload_raw(v.data(), dt, shape);
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
    return be.upload_raw(h.data(), DType::BF16, shape);
}

inline std::vector<float> get(Backend& be, const Tensor& t) {
    std::vector<uint8_t> raw(t.nbytes());
    be.to_host(t, raw.data());
    std::vector<float> f(static_cast<size_t>(t.numel()));
    convert_to_f32(t.dtype, raw.data(), f.data(), f.size());
    return f;
}

// Relative tolerance of a BF16 output against the fp32 CPU twin: one rounding (at most 2^-8 relative, half the
// 2^-7 step) on top of fp32 summation-order differences, doubled (house rule 1).
constexpr double kRtolBf16 = 8e-3;

// NaN in every element (0xFF bytes are NaN as F32 and as BF16), so an element a kernel misses fails.
inline void poison(CudaBackend& be, const Tensor& t) {
    ASSERT_EQ(cudaMemsetAsync(t.data, 0xFF, t.nbytes(), be.stream()), cudaSuccess);
}

// Every |got - want| <= atol + rtol * |want|; reports the worst element.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
                         const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double worst = -1;
    size_t wi = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::abs(double(got[i]) - double(want[i])) - (atol + rtol * std::abs(double(want[i])));
        if (err > worst || std::isnan(got[i])) {
            worst = std::isnan(got[i]) ? 1e30 : err;
            wi = i;
        }
    }
    EXPECT_LE(worst, 0.0) << what << ": element " << wi << " got " << got[wi] << " want " << want[wi] << " (atol "
                          << atol << ", rtol " << rtol << ", n " << got.size() << ")";
}

// y [T, N] = x [T, K] w [N, K]^T in double, and mag = sum_k |x w|, the scale each element's rounding is
// relative to (the reference of the GEMV / quantized-GEMM tests).
inline void host_matmul(const std::vector<float>& x, const std::vector<float>& w, int64_t T, int64_t N, int64_t K,
                        std::vector<double>& y, std::vector<double>& mag) {
    y.assign(static_cast<size_t>(T * N), 0.0);
    mag.assign(static_cast<size_t>(T * N), 0.0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n) {
            double s = 0, m = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double p = double(x[static_cast<size_t>(t * K + k)]) * double(w[static_cast<size_t>(n * K + k)]);
                s += p;
                m += std::fabs(p);
            }
            y[static_cast<size_t>(t * N + n)] = s;
            mag[static_cast<size_t>(t * N + n)] = m;
        }
}

}  // namespace grimoire::test
