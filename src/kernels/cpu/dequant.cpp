#include "kernels/cpu/dequant.h"

#include <algorithm>
#include <array>
#include <vector>

#include "core/dtype.h"
#include "core/threadpool.h"
#include "kernels/cpu/dot_tile.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/simd.h"

namespace grimoire::cpu {

namespace {

// Channel k of a packed row (Int4Weights' layout).
int32_t int4_code(const uint8_t* row, int64_t k) {
    return (row[k / 32 * 16 + k % 16] >> (4 * (k % 32 / 16))) & 15;
}

// One run of channels k0 .. k0 + n - 1 of a packed row sharing a zero point and a scale: o[i] = float(q - z)
// * s, the oracle's expression (q - z is a small integer, so the float and the product are the exact same
// values in any order). From a 32-aligned k0 the whole blocks are unpacked to one byte a code, up to 512 at a
// time, and converted by a plain loop over those bytes (two simple loops vectorize; one loop doing both did
// not); the rest goes channel by channel.
GRIMOIRE_SIMD_CLONES void int4_run(const uint8_t* row, int64_t k0, int64_t n, int32_t z, float s, float* o) {
    int64_t i = 0;
    if (k0 % 32 == 0) {
        uint8_t c[512];
        while (i + 32 <= n) {
            const int64_t m = std::min<int64_t>(512, (n - i) / 32 * 32);
            const uint8_t* b = row + (k0 + i) / 2;
            for (int64_t j = 0; j < m / 32; ++j)
                for (int64_t l = 0; l < 16; ++l) {
                    c[j * 32 + l] = b[j * 16 + l] & 15;
                    c[j * 32 + 16 + l] = b[j * 16 + l] >> 4;
                }
            for (int64_t j = 0; j < m; ++j) o[i + j] = static_cast<float>(static_cast<int32_t>(c[j]) - z) * s;
            i += m;
        }
    }
    for (; i < n; ++i) o[i] = static_cast<float>(int4_code(row, k0 + i) - z) * s;
}
GRIMOIRE_SIMD_CLONES void fp8_run(const uint8_t* q, int64_t n, const float* lut, float s, float* o) {
    for (int64_t i = 0; i < n; ++i) o[i] = lut[q[i]] * s;
}
// fp8_e4m3_to_f32 of every byte.
const float* fp8_lut() {
    static const auto lut = [] {
        std::array<float, 256> t{};
        for (int b = 0; b < 256; ++b) t[static_cast<size_t>(b)] = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
        return t;
    }();
    return lut.data();
}

}  // namespace

namespace {

// Where each run of channels with one group starts (then K), or empty where groups are scattered: g_idx is
// k / group_size unless the checkpoint is act-order (the CPU keeps its channel order; only the CUDA repack
// permutes K).
std::vector<int64_t> int4_runs(const Int4Weights& w) {
    std::vector<int64_t> start;
    for (int64_t k = 0; k < w.K; ++k)
        if (k == 0 || w.g_idx[k] != w.g_idx[k - 1]) start.push_back(k);
    start.push_back(w.K);
    if (static_cast<int64_t>(start.size()) * 8 > w.K) start.clear();  // scattered: one channel at a time
    return start;
}

void int4_rows_runs(
    const Int4Weights& w, const std::vector<int64_t>& runs, int64_t n0, int64_t n1, float* out) {
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* q = w.q + n * int4_row_bytes(w.K);
        float* o = out + (n - n0) * w.K;
        if (runs.empty()) {
            for (int64_t k = 0; k < w.K; ++k) {
                const int64_t g = w.g_idx[k];
                o[k] = static_cast<float>(int4_code(q, k) - w.zeros[g * w.N + n]) * w.scales[g * w.N + n];
            }
            continue;
        }
        for (size_t r = 0; r + 1 < runs.size(); ++r) {
            const int64_t k0 = runs[r], k1 = runs[r + 1], g = w.g_idx[k0];
            int4_run(q, k0, k1 - k0, w.zeros[g * w.N + n], w.scales[g * w.N + n], o + k0);
        }
    }
}

}  // namespace

std::vector<uint8_t> pack_int4(const uint8_t* codes, int64_t N, int64_t K) {
    const int64_t rb = int4_row_bytes(K), full = K / 32;
    std::vector<uint8_t> p(static_cast<size_t>(N * rb), 0);
    // At load, once per layer (a 27B model packs ~27 G codes): rows over the pool, whole blocks by a plain
    // loop.
    parallel_for(
        N,
        [&](int64_t n0, int64_t n1) {
            for (int64_t n = n0; n < n1; ++n) {
                const uint8_t* c = codes + n * K;
                uint8_t* o = p.data() + n * rb;
                for (int64_t b = 0; b < full; ++b)
                    for (int64_t l = 0; l < 16; ++l)
                        o[b * 16 + l] =
                            static_cast<uint8_t>((c[b * 32 + l] & 15) | (c[b * 32 + 16 + l] & 15) << 4);
                for (int64_t k = full * 32; k < K; ++k)
                    o[k / 32 * 16 + k % 16] |= static_cast<uint8_t>((c[k] & 15) << (4 * (k % 32 / 16)));
            }
        },
        std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, K)));
    return p;
}

void dequant_int4_rows(const Int4Weights& w, int64_t n0, int64_t n1, float* out) {
    int4_rows_runs(w, int4_runs(w), n0, n1, out);
}

void dequant_fp8_rows(const Fp8Weights& w, int64_t n0, int64_t n1, float* out) {
    const int64_t sk = (w.K + w.bk - 1) / w.bk;
    const float* lut = fp8_lut();
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* q = w.w + n * w.K;
        const float* s = w.scales + (n / w.bn) * sk;
        float* o = out + (n - n0) * w.K;
        for (int64_t j = 0; j < sk; ++j) {
            const int64_t k0 = j * w.bk, k1 = std::min(w.K, k0 + w.bk);
            fp8_run(q + k0, k1 - k0, lut, s[j], o + k0);
        }
    }
}

namespace {

// Rows per dequantized tile: with many activation rows, 16 rows of K floats stay in L2 for the T dot products
// that reuse them; with one to four the tile is used once, so two rows (one dot pair) that stay in L1.
constexpr int64_t kTile = 16, kTileFew = 2;
constexpr int64_t kFewRows = 4;  // "one to four activation rows": decode, a small batch

// Each tile of rows is dequantized to fp32 and multiplied by matmul's own kernel (matmul_rows_f32), so a
// quantized matmul gives the same sums, in the same order, as matmul on the dequantized weight.
template <typename Dequant>
void tiled_matmul(const float* x, int64_t T, int64_t K, int64_t N, float* out, const Dequant& dequant) {
    const int64_t rows = T <= kFewRows ? kTileFew : kTile;
    const int64_t tiles = (N + rows - 1) / rows;
    // Grain: at least ~64K multiply-adds per task so small layers stay on the calling thread.
    const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, rows * K * T));
    parallel_for(
        tiles,
        [&](int64_t t0, int64_t t1) {
            std::vector<float> tile(static_cast<size_t>(rows * K));
            for (int64_t ti = t0; ti < t1; ++ti) {
                const int64_t n0 = ti * rows, n1 = std::min(N, n0 + rows);
                dequant(n0, n1, tile.data());
                matmul_rows_f32(x, tile.data(), T, K, N, n1 - n0, out + n0);
            }
        },
        grain);
}

// FP8, one to four activation rows: the codes are widened in registers inside the dot product (as matmul
// widens BF16), so no tile is written and read back; the values are dequant_fp8_rows' and the sums
// dot::tile's, so the result is the tiled path's bit for bit. Needs each 8 channels below K / 8 * 8 in one
// scale block (bk a multiple of 8, or all of K). (INT4 the same way measured slower than its tile: its scale
// and zero point looked up per eight channels cost more than the tile's write and read; docs/BENCHMARKS.md.)
using dot::v8f;

struct Fp8Rows {
    const Fp8Weights& w;
    const float* lut;
    int64_t n, sk;
    [[gnu::always_inline]] float scale(int r, int64_t k) const {
        return w.scales[((n + r) / w.bn) * sk + k / w.bk];
    }
    [[gnu::always_inline]] v8f vec(int r, int64_t k) const {
        const uint8_t* q = w.w + (n + r) * w.K + k;
        const v8f v = {lut[q[0]], lut[q[1]], lut[q[2]], lut[q[3]],
                       lut[q[4]], lut[q[5]], lut[q[6]], lut[q[7]]};
        return v * scale(r, k);
    }
    [[gnu::always_inline]] float at(int r, int64_t k) const {
        return lut[w.w[(n + r) * w.K + k]] * scale(r, k);
    }
};

GRIMOIRE_SIMD_CLONES void fp8_rows_fused(
    const float* x, const Fp8Weights& w, int64_t T, int64_t n0, int64_t n1, float* out) {
    const float* lut = fp8_lut();
    const int64_t sk = (w.K + w.bk - 1) / w.bk;
    for (int64_t n = n0; n < n1; n += 2) {
        const Fp8Rows rows{w, lut, n, sk};
        if (n + 1 < n1)
            dot::rows<2>(x, rows, T, w.K, w.N, out + n);
        else
            dot::rows<1>(x, rows, T, w.K, w.N, out + n);
    }
}

}  // namespace

void matmul_int4(const float* x, const Int4Weights& w, int64_t T, float* out) {
    const std::vector<int64_t> runs = int4_runs(w);
    tiled_matmul(x, T, w.K, w.N, out,
                 [&](int64_t n0, int64_t n1, float* o) { int4_rows_runs(w, runs, n0, n1, o); });
}

void matmul_fp8(const float* x, const Fp8Weights& w, int64_t T, float* out) {
    if (T <= kFewRows && (w.bk % 8 == 0 || w.bk >= w.K)) {
        // Rows split over the pool as matmul splits them (>= 2^17 multiply-adds a chunk).
        parallel_for(
            w.N, [&](int64_t n0, int64_t n1) { fp8_rows_fused(x, w, T, n0, n1, out); },
            std::max<int64_t>(16, (int64_t{1} << 17) / std::max<int64_t>(1, w.K * T)));
        return;
    }
    tiled_matmul(x, T, w.K, w.N, out,
                 [&](int64_t n0, int64_t n1, float* o) { dequant_fp8_rows(w, n0, n1, o); });
}

}  // namespace grimoire::cpu
