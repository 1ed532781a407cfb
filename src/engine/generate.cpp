#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace grimoire {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GenerateStats generate(Model& model,
                       SequenceState& state,
                       std::span<const int32_t> prompt,
                       const GenerateOptions& opts,
                       const TokenCallback& on_token) {
    const int64_t n_prompt = static_cast<int64_t>(prompt.size());
    if (state.n_past >= n_prompt)
        throw Error("generate: the prompt (" + std::to_string(n_prompt) + " tokens) must extend the state (" +
                    std::to_string(state.n_past) + " tokens already run) by at least one token");
    if (n_prompt > state.max_ctx())
        throw Error("prompt of " + std::to_string(n_prompt) + " tokens exceeds the context of " +
                    std::to_string(state.max_ctx()) + " tokens");
    const int64_t vocab = model.info().vocab_size;
    GenerateStats stats;

    std::vector<int32_t> stop_ids = opts.extra_stop_ids;
    if (!opts.ignore_eos)
        stop_ids.insert(stop_ids.end(), model.info().eos_token_ids.begin(), model.info().eos_token_ids.end());
    std::vector<int32_t> history(prompt.begin(), prompt.end());
    // prompt_len = n_prompt: presence/frequency penalties count generated ids only.
    Sampler sampler(opts.sampling, vocab, n_prompt);
    const SamplingParams& sp = opts.sampling;
    // Greedy without penalties and without logits for the callback: the argmax where the logits are.
    const bool device_greedy = !opts.want_logits && sampler.greedy() && sp.repetition_penalty == 1.0f &&
                               sp.presence_penalty == 0.0f && sp.frequency_penalty == 0.0f;
    auto greedy_now = [&] { return device_greedy && stats.generated_tokens >= opts.min_tokens; };
    std::vector<int32_t> ids;  // forward_greedy's id of the last row

    // Prefill in chunks; only the last chunk asks for logits (of its last token), or its greedy id.
    auto t0 = std::chrono::steady_clock::now();
    std::vector<float> logits;
    const int64_t chunk = std::max<int64_t>(1, opts.prefill_chunk);
    stats.prompt_tokens = n_prompt - state.n_past;
    bool have_id = false;
    while (state.n_past < n_prompt) {
        const int64_t n = std::min(chunk, n_prompt - state.n_past);
        const bool last = state.n_past + n == n_prompt;
        const auto part = prompt.subspan(static_cast<size_t>(state.n_past), static_cast<size_t>(n));
        if (last && greedy_now())
            model.forward_greedy(state, part, 1, ids), have_id = true;
        else
            model.forward(state, part, last ? 1 : 0, logits);
    }
    stats.prompt_seconds = seconds_since(t0);

    t0 = std::chrono::steady_clock::now();
    std::vector<float> work(static_cast<size_t>(vocab));
    stats.finish_reason = "length";
    while (stats.generated_tokens < opts.max_tokens) {
        int32_t id;
        std::span<const float> row;
        if (have_id) {
            id = ids[0];
        } else {
            std::copy(logits.begin(), logits.begin() + vocab, work.begin());  // the sampler edits its input
            if (stats.generated_tokens < opts.min_tokens)
                for (int32_t s : stop_ids)
                    if (s >= 0 && s < vocab) work[static_cast<size_t>(s)] = -std::numeric_limits<float>::infinity();
            id = sampler.sample(work.data(), history);
            row = std::span<const float>(logits.data(), static_cast<size_t>(vocab));
        }
        history.push_back(id);
        ++stats.generated_tokens;
        const bool stop = std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
        const bool go_on = on_token(id, row);
        if (stop || !go_on) {
            stats.finish_reason = stop ? "stop" : "cancelled";
            break;
        }
        if (stats.generated_tokens >= opts.max_tokens || state.n_past >= state.max_ctx()) break;
        const int32_t one[1] = {id};
        have_id = greedy_now();
        if (have_id)
            model.forward_greedy(state, one, 1, ids);
        else
            model.forward(state, one, 1, logits);
    }
    stats.decode_seconds = seconds_since(t0);
    return stats;
}

}  // namespace grimoire
