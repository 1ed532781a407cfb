// Depthwise causal conv1d + SiLU (Qwen3.5 GDN). Input row r < 0 comes from the carried state, whose last
// row is the token just before this call; tap K-1 multiplies the current token.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threadpool.h"
#include "kernels/cpu/kernels.h"

namespace grimoire::cpu {

void conv1d_silu(const float* x, const float* w, float* state, int64_t T, int64_t C, int64_t K, float* out) {
    const int64_t S = K - 1;  // state rows
    parallel_for(C, [&](int64_t c0, int64_t c1) {
        std::vector<float> hist(static_cast<size_t>(S + T));  // one channel's input: state rows, then x
        for (int64_t c = c0; c < c1; ++c) {
            for (int64_t r = 0; r < S; ++r) hist[static_cast<size_t>(r)] = state[r * C + c];
            for (int64_t t = 0; t < T; ++t) hist[static_cast<size_t>(S + t)] = x[t * C + c];
            const float* wc = w + c * K;
            for (int64_t t = 0; t < T; ++t) {
                float s = 0.0f;
                for (int64_t j = 0; j < K; ++j) s += wc[j] * hist[static_cast<size_t>(t + j)];
                out[t * C + c] = s / (1.0f + std::exp(-s));
            }
            // The new state is the last K-1 input rows (pre-conv), state rows included when T < K-1.
            for (int64_t r = 0; r < S; ++r) state[r * C + c] = hist[static_cast<size_t>(T + r)];
        }
    }, std::max<int64_t>(64, (int64_t{1} << 16) / std::max<int64_t>(1, T * K)));  // >= ~64k MACs per chunk
}

}  // namespace grimoire::cpu
