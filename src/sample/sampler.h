// Token sampling for one request: penalties, temperature, top-k, top-p, min-p (in that order), then a draw
// from the remaining distribution with a per-request RNG (deterministic given the seed).
//
// Penalty semantics (as vLLM; OpenAI's API leaves the scope open):
//  * repetition_penalty (HF / CTRL): every distinct token seen in prompt + generated has its logit divided by
//    the penalty when positive and multiplied by it when negative;
//  * presence_penalty / frequency_penalty (OpenAI): over GENERATED tokens only,
//    logit -= presence * [count > 0] + frequency * count.
// temperature < 1e-5 means greedy: the argmax of the penalised logits, the lowest id on ties (no RNG use).
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace grimoire {

struct SamplingParams {
    float temperature = 1.0f;
    float top_p = 1.0f;
    int top_k = 0;  // 0 (or >= vocab) = off
    float min_p = 0.0f;
    float repetition_penalty = 1.0f;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    uint64_t seed = 0;
    bool has_seed = false;
};

class Sampler {
public:
    // `prompt_len`: how many leading ids of the `history` given to sample(history) are the prompt (the rest
    // are generated, and only they count for presence/frequency penalties).
    Sampler(const SamplingParams& p, int64_t vocab, int64_t prompt_len = 0);

    // logits [vocab] f32, modified in place: afterwards they hold the penalised, temperature-scaled logits
    // with every truncated (top-k/top-p/min-p) token set to -inf. history = prompt + generated ids.
    int32_t sample(float* logits, std::span<const int32_t> history);
    // The same with the prompt and generated ids given separately.
    int32_t sample(float* logits, std::span<const int32_t> prompt, std::span<const int32_t> generated);

    const SamplingParams& params() const { return p_; }
    bool greedy() const;

private:
    void apply_penalties(float* logits, std::span<const int32_t> prompt, std::span<const int32_t> generated);

    SamplingParams p_;
    int64_t vocab_;
    int64_t prompt_len_;
    std::mt19937_64 rng_;
    std::vector<int32_t> ids_;      // scratch: candidate ids / sorted history
    std::vector<double> probs_;     // scratch: candidate probabilities
};

// Index of the largest value, the lowest index on ties; NaN never wins (0 when every value is NaN), as
// Backend::argmax on every backend.
int32_t argmax(const float* logits, int64_t n);

// log-softmax of raw logits into out (resized to n), computed in double.
void log_softmax(const float* logits, int64_t n, std::vector<float>& out);
// The n most likely (id, logprob) pairs, most likely first, lower id first on ties.
std::vector<std::pair<int32_t, float>> top_logprobs(const std::vector<float>& logprobs, int n);

}  // namespace grimoire
