// The model interface the engine drives, and the loader that picks an architecture by the
// `architectures` string of config.json (src/model/arch/registry.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kv/sequence_state.h"

namespace grimoire {

struct ModelInfo {
    std::string architecture;     // e.g. "LlamaForCausalLM"
    std::string model_type;       // config model_type
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t num_layers = 0;
    int64_t max_position_embeddings = 0;
    int64_t n_params = 0;         // parameters actually loaded
    size_t weight_bytes = 0;      // bytes as stored on the backend
    int32_t bos_token_id = -1;
    std::vector<int32_t> eos_token_ids;  // config.json + generation_config.json
    std::vector<std::string> dtypes;     // distinct dtypes in the checkpoint
    // The checkpoint's projections by weight format (Linear::format(), e.g. "gptq int4 g128", "BF16"): how
    // many were loaded in each (a stacked group counts its parts; a head tied to the embeddings is not one).
    std::map<std::string, int64_t> linear_formats;
};

// "42 gptq int4 g128, 14 BF16": ModelInfo::linear_formats, most frequent first ("none" when empty).
std::string linear_formats_summary(const ModelInfo& info);

class Model {
public:
    virtual ~Model() = default;
    const ModelInfo& info() const { return info_; }
    Backend& backend() const { return *be_; }

    // A fresh state able to hold max_ctx tokens.
    virtual std::unique_ptr<SequenceState> new_state(int64_t max_ctx) = 0;
    // Runs `tokens` at positions state.n_past.. (appending to the caches, advancing n_past) and writes fp32
    // logits for the last `n_logits` tokens into logits [n_logits, vocab] (host memory).
    virtual void forward(SequenceState& state, std::span<const int32_t> tokens, int64_t n_logits,
                         std::vector<float>& logits) = 0;
    // Greedy decoding's step: runs `tokens` as forward() does and writes ids [n_rows], the argmax token of each
    // of the last n_rows positions (the lowest id on ties, as Sampler's greedy), found where the logits are: a
    // GPU backend copies back n_rows ids instead of n_rows x vocab logits. This default takes forward()'s.
    virtual void forward_greedy(SequenceState& state, std::span<const int32_t> tokens, int64_t n_rows,
                                std::vector<int32_t>& ids);

protected:
    ModelInfo info_;
    Backend* be_ = nullptr;
};

// Loads the checkpoint directory `dir` onto `be`. Throws Error for a missing directory, a malformed or
// unsupported config.json (naming key and value), or bad tensors (naming file and tensor).
std::unique_ptr<Model> load_model(const std::string& dir, Backend& be);

}  // namespace grimoire
