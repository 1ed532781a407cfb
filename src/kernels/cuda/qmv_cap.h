// The shared-memory padding that caps a grid at `minb` resident blocks an SM (qmm.cu qmv_cap_smem,
// GRIMOIRE_QMV_CAP): plain host arithmetic, no CUDA types, so the host tests check it on the CPU.
#pragma once

#include <cstddef>

namespace grimoire::cuda {

// Dynamic shared memory (bytes) for a launch that needs `smem` bytes of it, has `static_bytes` of static
// shared memory, on an SM of `per_sm` bytes that reserves `reserved` bytes a block: the smallest size at
// which minb + 1 blocks no longer fit, if that is above `smem` and within `max_dyn`; else `smem` unchanged.
// minb blocks still fit at the padded size: minb * (per_sm / (minb + 1) + 1) <= per_sm for every minb >= 1
// and per_sm >= minb + 1.
constexpr size_t qmv_cap_bytes(
    size_t smem, size_t static_bytes, size_t per_sm, size_t reserved, int minb, size_t max_dyn) {
    if (minb < 1 || per_sm == 0) return smem;
    const size_t fixed = static_bytes + reserved;
    const size_t need =
        per_sm / static_cast<size_t>(minb + 1) + 1;  // a block's total above which minb + 1 fail
    if (need <= fixed) return smem;
    const size_t want = need - fixed;
    return want > smem && want <= max_dyn ? want : smem;
}

}  // namespace grimoire::cuda
