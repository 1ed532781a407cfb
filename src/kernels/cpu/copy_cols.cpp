// Column slice of a row-major matrix (e.g. splitting a fused qkv projection), any element size.
#include <cstring>

#include "kernels/cpu/kernels.h"

namespace grimoire::cpu {

void copy_cols(const void* src, int64_t R, int64_t C, int64_t c0, int64_t n, size_t elem, void* out) {
    const auto* s = static_cast<const uint8_t*>(src);
    auto* d = static_cast<uint8_t*>(out);
    const size_t row_in = static_cast<size_t>(C) * elem, row_out = static_cast<size_t>(n) * elem;
    for (int64_t r = 0; r < R; ++r) std::memcpy(d + r * row_out, s + r * row_in + c0 * elem, row_out);
}

}  // namespace grimoire::cpu
