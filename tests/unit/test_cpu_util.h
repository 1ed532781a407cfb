// Helpers for the CPU kernel tests: seeded random data and host <-> backend tensors.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace grimoire::test {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

inline std::vector<float> host(const Backend& be, const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    be.to_host(t, v.data());
    return v;
}

// |got - want| <= atol + rtol * |want| element-wise, with the first failure reported.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rtol, double atol,
                         const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << what << " at " << i;
}

}  // namespace grimoire::test
