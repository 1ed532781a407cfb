// The single-sequence generation loop: prefill the prompt, then sample token by token until an EOS id,
// max_tokens, the context limit, or the callback says stop. The server's engine thread and `grimoire run`
// are built on it.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "sample/sampler.h"

namespace grimoire {

struct GenerateOptions {
    int64_t max_tokens = 256;
    SamplingParams sampling;
    bool ignore_eos = false;              // do not stop on the model's EOS ids (extra_stop_ids still stop)
    int64_t min_tokens = 0;               // EOS and extra stop ids are masked until this many tokens exist
    std::vector<int32_t> extra_stop_ids;  // stop ids besides ModelInfo::eos_token_ids (e.g. the tokenizer's)
    int64_t prefill_chunk = 512;          // prompt tokens per forward (bounds scratch memory)
    // on_token needs the logits (logprobs). Without them a greedy request with no penalties takes
    // Model::forward_greedy once min_tokens are out: the argmax is found where the logits are (on a GPU only
    // the id comes back) and on_token gets an empty span.
    bool want_logits = true;
};

struct GenerateStats {
    int64_t prompt_tokens = 0;     // prompt tokens actually run (excludes those already in the state)
    int64_t generated_tokens = 0;  // sampled tokens, including a final stop token
    double prompt_seconds = 0, decode_seconds = 0;
    std::string finish_reason;  // "stop" | "length" | "cancelled"
};

// on_token(id, logits) is called for every sampled token, including the stop token that ends generation
// (finish_reason "stop"); logits [vocab] are the raw model logits the token was sampled from (before
// penalties and temperature), for logprobs (empty when GenerateOptions::want_logits is false and the step
// took the greedy path). Returning false stops generation ("cancelled").
using TokenCallback = std::function<bool(int32_t id, std::span<const float> logits)>;

// Runs prompt[state.n_past..] (tokens already in the state are not re-run; at least one must be new) and
// generates. Generation also ends with "length" when the state's context is full.
GenerateStats generate(Model& model,
                       SequenceState& state,
                       std::span<const int32_t> prompt,
                       const GenerateOptions& opts,
                       const TokenCallback& on_token);

}  // namespace grimoire
