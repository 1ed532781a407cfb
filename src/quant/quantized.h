// The quantized Linear implementations and the format probes that build them (asked by load_linear through
// quant/formats.cpp). Each checkpoint packing is decoded once, at load, into the canonical layouts of
// kernels/cpu/dequant.h; the Linear keeps them and forwards through the CPU oracle kernels.
//   - INT4 group-quantized (GPTQ v1/v2, AutoRound auto_gptq / auto_awq packings, compressed-tensors
//     pack-quantized): one Int4 Linear; the readers differ in packing and zero convention only.
//   - FP8 E4M3 (block-scaled `weight_scale_inv`, per-channel / per-tensor `weight_scale`): one Fp8 Linear.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "quant/linear.h"

namespace grimoire {

// What a weight is in its model: a layout hint for backends that pack weights per use (the CUDA FP8 linear packs
// the MLP's two weights in the order of its one-launch MLP block, backend/cuda/quant_linear.cpp). Results never
// depend on it. GLU_GATE_UP: a stacked [gate; up] weight [2 I, D] (forward_glu / forward_mlp); MLP_DOWN: the
// down projection [D, I] beside it.
enum class WeightRole : uint8_t { OTHER, GLU_GATE_UP, MLP_DOWN };

// Canonical INT4: see cpu::Int4Weights for the dequant formula.
struct Int4Host {
    std::vector<uint8_t> q;       // [N, K] u8 0..15 (the CPU Linear keeps it packed: cpu::pack_int4)
    std::vector<int32_t> zeros;   // [G, N] i32 (real zero point)
    std::vector<float> scales;    // [G, N] f32
    std::vector<int32_t> g_idx;   // [K] i32
    int64_t N = 0, K = 0, G = 0;
};

struct Fp8Host {
    std::vector<uint8_t> w;       // [N, K] e4m3
    std::vector<float> scales;    // [ceil(N / bn), ceil(K / bk)] f32
    int64_t N = 0, K = 0, bn = 1, bk = 1;
    WeightRole role = WeightRole::OTHER;
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

// One layer's quantized weight in canonical host form, read but not yet built into a Linear: the loader stacks
// several projections of one input (q/k/v, gate/up, DeltaNet qkv/z) into one Linear before building it, so a
// decode step runs one kernel per group whatever the format. Exactly one of int4 / fp8 is set. With
// be.random_weights() the host weight carries shapes and g_idx only (no q / zeros / scales / w).
struct QuantHost {
    std::optional<Int4Host> int4;
    std::optional<Fp8Host> fp8;
    std::vector<const TensorInfo*> bias;  // per stacked part, `prefix.bias` [N_i] (validated); empty: no bias
    std::string format;                   // Linear::format()
    size_t stored_bytes = 0;
    WeightRole role = WeightRole::OTHER;  // set by the model's loader (stack_quantized leaves OTHER)
    int64_t N() const { return int4 ? int4->N : fp8->N; }
    int64_t K() const { return int4 ? int4->K : fp8->K; }
};

// The quantized weight stored at `prefix` in any quantized format (the readers of the probes below, same
// order), or nullopt when there is none (a plain float weight, or nothing). Throws like load_linear for an
// inconsistent or unsupported set.
std::optional<QuantHost> read_quantized(Backend& be, const Checkpoint& ckpt, const std::string& prefix,
                                        const QuantConfig& qc, bool allow_bias);
// `next` can follow `prev` (itself possibly stacked) along N in one weight with the exact same result per
// output: same family and K; INT4: same g_idx (act-order permutation), group count and symmetry (all zero
// points 8, or not: a symmetric group keeps the zero-free kernel); FP8: the same scale grid (per-channel and
// per-tensor count as per-channel) and prev's N a multiple of the block's bn; bias on all parts or none.
bool can_stack(const QuantHost& prev, const QuantHost& next);
// The parts concatenated along N (rows of q / w, columns of zeros / scales, rows of the FP8 scale grid); each
// consecutive pair must pass can_stack.
QuantHost stack_quantized(std::vector<QuantHost> parts);
// The Linear of `h` on `be` (CPU oracle, or the CUDA repacked one); the bias parts are uploaded as one [N] F32.
std::unique_ptr<Linear> make_quantized_linear(Backend& be, QuantHost h);

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
// `prefix.bias` [N] checked (shape, allowed) as a one-part QuantHost::bias list, empty when absent.
std::vector<const TensorInfo*> find_bias(const Checkpoint& ckpt, const std::string& prefix, int64_t N,
                                         bool allow_bias);
// A one-part QuantHost.
QuantHost host_of(Int4Host w, std::vector<const TensorInfo*> bias, std::string format, size_t stored_bytes);
QuantHost host_of(Fp8Host w, std::vector<const TensorInfo*> bias, std::string format, size_t stored_bytes);
// make_quantized_linear(be, *h), or nullptr without h: a probe from a reader.
std::unique_ptr<Linear> linear_or_null(Backend& be, std::optional<QuantHost> h);
// The readers: the canonical host form at `prefix`, or nullopt when the tensors there are not this format's.
std::optional<QuantHost> read_gptq(Backend& be, const Checkpoint& ckpt, const std::string& prefix,
                                   const QuantConfig& qc, bool allow_bias);
std::optional<QuantHost> read_compressed_tensors(Backend& be, const Checkpoint& ckpt, const std::string& prefix,
                                                 const QuantConfig& qc, bool allow_bias);
std::optional<QuantHost> read_fp8(Backend& be, const Checkpoint& ckpt, const std::string& prefix,
                                  const QuantConfig& qc, bool allow_bias);
}  // namespace quant_detail

}  // namespace grimoire
