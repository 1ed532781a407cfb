// The quantized Linear implementations and the format probes that build them (asked by load_linear through
// quant/formats.cpp). Each checkpoint packing is decoded once, at load, into the canonical layouts of
// kernels/cpu/dequant.h; the Linear keeps them and forwards through the CPU oracle kernels.
//   - INT4 group-quantized (GPTQ v1/v2, AutoRound auto_gptq / auto_awq packings, compressed-tensors
//     pack-quantized): one Int4 Linear; the readers differ in packing and zero convention only.
//   - FP8 E4M3 (block-scaled `weight_scale_inv`, per-channel / per-tensor `weight_scale`): one Fp8 Linear.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "quant/linear.h"

namespace grimoire {

// Canonical INT4: see cpu::Int4Weights for the dequant formula.
struct Int4Host {
    std::vector<uint8_t> q;       // [N, K] u8 0..15
    std::vector<int32_t> zeros;   // [G, N] i32 (real zero point)
    std::vector<float> scales;    // [G, N] f32
    std::vector<int32_t> g_idx;   // [K] i32
    int64_t N = 0, K = 0, G = 0;
};

struct Fp8Host {
    std::vector<uint8_t> w;       // [N, K] e4m3
    std::vector<float> scales;    // [ceil(N / bn), ceil(K / bk)] f32
    int64_t N = 0, K = 0, bn = 1, bk = 1;
};

// `format` names the checkpoint format for format(); `stored_bytes` is what the checkpoint stores for this
// layer (packed weights + scales + zeros), the roofline numerator. `bias` [N] F32 may be empty.
// With a Backend the Linear is built for that backend's device (CUDA: repacked and uploaded at load; with
// be.random_weights() the host weight may carry shapes and g_idx only, see backend/cuda/quant_linear.cpp).
// Without one it is the CPU implementation.
std::unique_ptr<Linear> make_int4_linear(Backend& be, Int4Host w, Tensor bias, std::string format,
                                         size_t stored_bytes);
std::unique_ptr<Linear> make_fp8_linear(Backend& be, Fp8Host w, Tensor bias, std::string format,
                                        size_t stored_bytes);
std::unique_ptr<Linear> make_int4_linear(Int4Host w, Tensor bias, std::string format, size_t stored_bytes);
std::unique_ptr<Linear> make_fp8_linear(Fp8Host w, Tensor bias, std::string format, size_t stored_bytes);
// The CUDA implementations (defined only in CUDA builds; backend/cuda/quant_linear.cpp).
std::unique_ptr<Linear> make_cuda_int4_linear(Backend& be, Int4Host w, Tensor bias, std::string format,
                                              size_t stored_bytes);
std::unique_ptr<Linear> make_cuda_fp8_linear(Backend& be, Fp8Host w, Tensor bias, std::string format,
                                             size_t stored_bytes);

// Probes (see quant/formats.h for the contract).
std::unique_ptr<Linear> probe_gptq(  // qweight/qzeros/scales[/g_idx]: GPTQ, AutoRound auto_gptq, AWQ packings
    Backend& be, const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& qc, bool allow_bias);
std::unique_ptr<Linear> probe_compressed_tensors(  // weight_packed/weight_scale/weight_shape
    Backend& be, const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& qc, bool allow_bias);
std::unique_ptr<Linear> probe_fp8(  // F8_E4M3 weight + weight_scale_inv or weight_scale
    Backend& be, const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& qc, bool allow_bias);

namespace quant_detail {
// Shared by the readers: errors name the file and tensor.
[[noreturn]] void fail(const TensorInfo& t, const std::string& why);
void expect_shape(const TensorInfo& t, const std::vector<int64_t>& shape);
std::vector<int32_t> read_i32(const TensorInfo& t);  // I32 tensor, else Error
std::vector<float> read_scales(const TensorInfo& t);  // F16/BF16/F32 tensor as f32, else Error
// `prefix.bias` [N] uploaded as F32, or an empty Tensor when absent.
Tensor load_bias(Backend& be, const Checkpoint& ckpt, const std::string& prefix, int64_t N, bool allow_bias);
}  // namespace quant_detail

}  // namespace grimoire
