// Rotary position embedding in place. cos/sin are computed once per (token, frequency) and reused by
// every head. The angle is pos * inv_freq in fp32, as transformers computes it, so long positions round
// the same way as the reference.
#include <cmath>
#include <vector>

#include "core/threadpool.h"
#include "kernels/cpu/kernels.h"

namespace grimoire::cpu {

void rope(float* x, int64_t T, int64_t H, int64_t D, const int32_t* positions, const RopeParams& p) {
    const int64_t half = p.rot_dim / 2;
    GRIMOIRE_CHECK(p.rot_dim % 2 == 0 && p.rot_dim <= D && static_cast<int64_t>(p.inv_freq.size()) == half,
                   "rope: rot_dim / inv_freq do not fit head_dim");
    parallel_for(T, [&](int64_t t0, int64_t t1) {
        std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
        for (int64_t t = t0; t < t1; ++t) {
            const float pos = static_cast<float>(positions[t]);
            for (int64_t i = 0; i < half; ++i) {
                const float ang = pos * p.inv_freq[static_cast<size_t>(i)];
                cs[static_cast<size_t>(i)] = std::cos(ang) * p.attn_factor;
                sn[static_cast<size_t>(i)] = std::sin(ang) * p.attn_factor;
            }
            for (int64_t h = 0; h < H; ++h) {
                float* v = x + (t * H + h) * D;
                for (int64_t i = 0; i < half; ++i) {
                    // NeoX pairs (i, i + half) ("rotate_half"); GPT-J pairs (2i, 2i + 1).
                    const int64_t i0 = p.neox ? i : 2 * i, i1 = p.neox ? i + half : 2 * i + 1;
                    const float a = v[i0], b = v[i1], c = cs[static_cast<size_t>(i)], s = sn[static_cast<size_t>(i)];
                    v[i0] = a * c - b * s;
                    v[i1] = b * c + a * s;
                }
            }
        }
    }, 4);
}

}  // namespace grimoire::cpu
