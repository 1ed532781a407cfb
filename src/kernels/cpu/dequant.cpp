#include "kernels/cpu/dequant.h"

#include <algorithm>
#include <vector>

#include "core/dtype.h"
#include "core/threadpool.h"

namespace grimoire::cpu {

void dequant_int4_rows(const Int4Weights& w, int64_t n0, int64_t n1, float* out) {
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* q = w.q + n * w.K;
        float* o = out + (n - n0) * w.K;
        for (int64_t k = 0; k < w.K; ++k) {
            const int64_t g = w.g_idx[k];
            o[k] = static_cast<float>(static_cast<int32_t>(q[k]) - w.zeros[g * w.N + n]) * w.scales[g * w.N + n];
        }
    }
}

void dequant_fp8_rows(const Fp8Weights& w, int64_t n0, int64_t n1, float* out) {
    const int64_t sk = (w.K + w.bk - 1) / w.bk;
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* q = w.w + n * w.K;
        const float* s = w.scales + (n / w.bn) * sk;
        float* o = out + (n - n0) * w.K;
        for (int64_t k = 0; k < w.K; ++k) o[k] = fp8_e4m3_to_f32(q[k]) * s[k / w.bk];
    }
}

namespace {

// Rows per dequantized tile: 16 rows of K floats stay in L2 for the T dot products that reuse them.
constexpr int64_t kTile = 16;

template <typename Dequant>
void tiled_matmul(const float* x, int64_t T, int64_t K, int64_t N, float* out, const Dequant& dequant) {
    const int64_t tiles = (N + kTile - 1) / kTile;
    // Grain: at least ~64K multiply-adds per task so small layers stay on the calling thread.
    const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, kTile * K * T));
    parallel_for(
        tiles,
        [&](int64_t t0, int64_t t1) {
            std::vector<float> tile(static_cast<size_t>(kTile * K));
            for (int64_t ti = t0; ti < t1; ++ti) {
                const int64_t n0 = ti * kTile, n1 = std::min(N, n0 + kTile);
                dequant(n0, n1, tile.data());
                for (int64_t t = 0; t < T; ++t) {
                    const float* xr = x + t * K;
                    for (int64_t n = n0; n < n1; ++n) {
                        const float* wr = tile.data() + (n - n0) * K;
                        float acc = 0.f;
                        for (int64_t k = 0; k < K; ++k) acc += xr[k] * wr[k];
                        out[t * N + n] = acc;
                    }
                }
            }
        },
        grain);
}

}  // namespace

void matmul_int4(const float* x, const Int4Weights& w, int64_t T, float* out) {
    tiled_matmul(x, T, w.K, w.N, out, [&](int64_t n0, int64_t n1, float* o) { dequant_int4_rows(w, n0, n1, o); });
}

void matmul_fp8(const float* x, const Fp8Weights& w, int64_t T, float* out) {
    tiled_matmul(x, T, w.K, w.N, out, [&](int64_t n0, int64_t n1, float* o) { dequant_fp8_rows(w, n0, n1, o); });
}

}  // namespace grimoire::cpu
