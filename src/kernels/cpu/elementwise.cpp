// Elementwise fp32 ops. Memory-bound: split across threads only when the array is large enough that
// the fork/join cost (a few microseconds) is repaid.
#include <cmath>

#include "core/threadpool.h"
#include "kernels/cpu/kernels.h"

namespace grimoire::cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;

inline float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void add(const float* a, const float* b, float* out, int64_t n) {
    parallel_for(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
    }, kGrain);
}

void scale(float* x, int64_t n, float s) {
    parallel_for(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) x[i] *= s;
    }, kGrain);
}

void mul_sigmoid(float* x, const float* gate, int64_t n) {
    parallel_for(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) x[i] *= sigmoidf(gate[i]);
    }, kGrain);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
    parallel_for(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) out[i] = gate[i] * sigmoidf(gate[i]) * up[i];
    }, kGrain);
}

void add_bias(float* x, const float* bias, int64_t T, int64_t N) {
    for (int64_t t = 0; t < T; ++t) {
        float* row = x + t * N;
        for (int64_t n = 0; n < N; ++n) row[n] += bias[n];
    }
}

}  // namespace grimoire::cpu
