// Token embedding lookup: one table row per token, converted to fp32.
#include <cstring>
#include <string>

#include "kernels/cpu/kernels.h"

namespace grimoire::cpu {

void embedding(const void* table, DType table_dtype, int64_t V, int64_t H, const int32_t* ids, int64_t T,
               float* out) {
    const size_t row_bytes = static_cast<size_t>(H) * dtype_size(table_dtype);
    for (int64_t t = 0; t < T; ++t) {
        // An out-of-range id is a caller bug (the tokenizer/server validate ids), not bad input data.
        GRIMOIRE_CHECK(ids[t] >= 0 && ids[t] < V, "embedding id " + std::to_string(ids[t]) + " out of range");
        const auto* row = static_cast<const uint8_t*>(table) + static_cast<size_t>(ids[t]) * row_bytes;
        convert_to_f32(table_dtype, row, out + t * H, static_cast<size_t>(H));
    }
}

}  // namespace grimoire::cpu
