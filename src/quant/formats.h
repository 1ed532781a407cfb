// The weight-format hook of load_linear(): an ordered list of probes. Each probe looks at the tensors stored
// under a prefix (and the quantization config) and either builds its Linear or answers nullptr ("not mine").
// load_linear() asks them in order; the dense BF16/F16/F32 probe is last and claims `prefix.weight`.
//
// Adding a format (GPTQ, AWQ, compressed-tensors, FP8...): write its Linear and probe in its own file under
// src/quant/ and add the probe to the list in formats.cpp, before probe_dense.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "quant/linear.h"

namespace grimoire {

// Returns the Linear stored at `prefix` when the tensors there are in this probe's format, else nullptr.
// Throws Error (naming the tensor and the reason) when the tensors are this format's but inconsistent.
using LinearProbe = std::unique_ptr<Linear> (*)(
    Backend& be, const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& qc, bool allow_bias);

// The probes in the order load_linear() asks them.
const std::vector<LinearProbe>& linear_format_probes();

// Plain weights: `prefix.weight` [out, in] in BF16/F16/F32, optional `prefix.bias` [out].
std::unique_ptr<Linear> probe_dense(
    Backend& be, const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& qc, bool allow_bias);

// A plain-weight Linear over an already uploaded weight [out, in] (e.g. the embedding table as a tied
// lm_head); dequantize() reads it back from `be`. `bias` [out] F32 may be empty.
std::unique_ptr<Linear> make_dense_linear(const Backend& be, Tensor weight, Tensor bias);

// The dtype a plain weight matrix is kept in on `be`: the checkpoint's own float dtype on a backend computing
// in F32 (the CPU matmul reads BF16/F16/F32 directly), else the backend's activation dtype (BF16 on CUDA).
DType dense_weight_dtype(const Backend& be, DType stored);

// "[out, in]": a shape as error messages print it.
std::string shape_str(const std::vector<int64_t>& s);

}  // namespace grimoire
