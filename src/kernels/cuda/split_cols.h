// One launch that splits src [R, C] into the column ranges out_i [R, n_i] (consecutive, sum n_i = C): the
// parts of a stacked projection group computed for several tokens (a verify step), which the layers need as
// contiguous tensors. One launch per group instead of one copy_cols per part.
#pragma once
#include <cuda_runtime_api.h>

#include "core/tensor.h"

namespace grimoire::cuda {

constexpr int kMaxSplitCols = 8;

// outs[0..n_outs): src and every out share one dtype (BF16, F16 or F32); 1..kMaxSplitCols outputs.
void split_cols(const Tensor& src, const Tensor* outs, int n_outs, cudaStream_t s);

}  // namespace grimoire::cuda
