#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace grimoire {

namespace {
constexpr float kGreedyEps = 1e-5f;  // vLLM's _SAMPLING_EPS: below this temperature sampling is greedy
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr size_t kPrefix = 1024;  // candidates sorted before falling back to a full-vocabulary sort
}  // namespace

int32_t argmax(const float* logits, int64_t n) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i)
        if (!std::isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
    return static_cast<int32_t>(best < 0 ? 0 : best);
}

Sampler::Sampler(const SamplingParams& p, int64_t vocab, int64_t prompt_len)
    : p_(p), vocab_(vocab), prompt_len_(prompt_len) {
    GRIMOIRE_CHECK(vocab > 0, "sampler: empty vocabulary");
    if (!(p.temperature >= 0.0f)) throw Error("temperature must be >= 0, got " + std::to_string(p.temperature));
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) throw Error("top_p must be in (0, 1], got " + std::to_string(p.top_p));
    if (p.top_k < 0) throw Error("top_k must be >= 0, got " + std::to_string(p.top_k));
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) throw Error("min_p must be in [0, 1], got " + std::to_string(p.min_p));
    if (!(p.repetition_penalty > 0.0f))
        throw Error("repetition_penalty must be > 0, got " + std::to_string(p.repetition_penalty));
    rng_.seed(p.has_seed ? p.seed : std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}());
}

bool Sampler::greedy() const { return p_.temperature < kGreedyEps; }

void Sampler::apply_penalties(float* logits, std::span<const int32_t> prompt, std::span<const int32_t> generated) {
    auto valid = [&](int32_t id) { return id >= 0 && id < vocab_; };
    if (p_.repetition_penalty != 1.0f) {
        ids_.assign(prompt.begin(), prompt.end());
        ids_.insert(ids_.end(), generated.begin(), generated.end());
        std::sort(ids_.begin(), ids_.end());
        ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
        for (int32_t id : ids_) {
            if (!valid(id)) continue;
            float& l = logits[id];
            l = l > 0.0f ? l / p_.repetition_penalty : l * p_.repetition_penalty;
        }
    }
    if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
        ids_.assign(generated.begin(), generated.end());
        std::sort(ids_.begin(), ids_.end());
        for (size_t i = 0; i < ids_.size();) {
            size_t j = i;
            while (j < ids_.size() && ids_[j] == ids_[i]) ++j;
            if (valid(ids_[i]))
                logits[ids_[i]] -= p_.presence_penalty + p_.frequency_penalty * static_cast<float>(j - i);
            i = j;
        }
    }
}

int32_t Sampler::sample(float* logits, std::span<const int32_t> history) {
    const size_t np = std::min(history.size(), static_cast<size_t>(std::max<int64_t>(prompt_len_, 0)));
    return sample(logits, history.first(np), history.subspan(np));
}

int32_t Sampler::sample(float* logits, std::span<const int32_t> prompt, std::span<const int32_t> generated) {
    apply_penalties(logits, prompt, generated);
    if (greedy()) return argmax(logits, vocab_);

    const float inv_t = 1.0f / p_.temperature;
    for (int64_t i = 0; i < vocab_; ++i) logits[i] *= inv_t;

    // Candidates in order of decreasing logit, lower id first on ties (a strict total order, so the
    // truncations below are exact and reproducible).
    auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    ids_.resize(static_cast<size_t>(vocab_));
    for (int64_t i = 0; i < vocab_; ++i) ids_[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    size_t n = ids_.size();
    if (p_.top_k > 0 && p_.top_k < vocab_) {
        n = static_cast<size_t>(p_.top_k);
        std::nth_element(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(n - 1), ids_.end(), before);
    }
    const bool need_order = p_.top_p < 1.0f || p_.min_p > 0.0f;
    double vocab_mass = -1.0;  // set when n shrinks to the sorted prefix: the mass of all candidates
    if (need_order && p_.top_k == 0 && n > kPrefix) {
        // Sorting a 150k-250k vocabulary every token is the sampler's main cost. The truncations only ever
        // keep a prefix of the sorted order, so sort a prefix of kPrefix ids and grow it 8x at a time
        // (selecting each next chunk from the unsorted rest) until it decides the cut: the top-p mass is
        // reached or a min-p failure lies inside it.
        float lmax_f = logits[0];
        for (int64_t i = 1; i < vocab_; ++i) lmax_f = std::max(lmax_f, logits[i]);
        const double lmax = lmax_f;
        double total = 0.0, head = 0.0;
        for (int64_t i = 0; i < vocab_; ++i) total += std::exp(static_cast<double>(logits[i]) - lmax);
        size_t sorted = 0;
        for (size_t m = kPrefix;; m *= 8) {
            m = std::min(m, n);
            if (m < n) std::nth_element(ids_.begin() + static_cast<std::ptrdiff_t>(sorted),
                                        ids_.begin() + static_cast<std::ptrdiff_t>(m - 1), ids_.end(), before);
            std::sort(ids_.begin() + static_cast<std::ptrdiff_t>(sorted), ids_.begin() + static_cast<std::ptrdiff_t>(m), before);
            for (size_t i = sorted; i < m; ++i) head += std::exp(static_cast<double>(logits[ids_[i]]) - lmax);
            sorted = m;
            const double last = std::exp(static_cast<double>(logits[ids_[m - 1]]) - lmax);
            const bool top_p_decided = p_.top_p < 1.0f && head >= static_cast<double>(p_.top_p) * total;
            const bool min_p_decided = p_.min_p > 0.0f && last < static_cast<double>(p_.min_p);
            if (m == n || top_p_decided || min_p_decided) break;
        }
        n = sorted;
        vocab_mass = total;
    } else if (need_order) {
        std::sort(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(n), before);
    } else if (n < ids_.size()) {
        std::nth_element(ids_.begin(), ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(n), before);
    }
    // ids_[0] is now the most likely candidate in every case.

    const double lmax = logits[ids_[0]];
    probs_.resize(n);
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) total += probs_[i] = std::exp(static_cast<double>(logits[ids_[i]]) - lmax);

    if (p_.top_p < 1.0f) {
        // Smallest prefix whose probability mass reaches top_p (the token that crosses it is kept).
        const double want = static_cast<double>(p_.top_p) * (vocab_mass >= 0.0 ? vocab_mass : total);
        double cum = 0.0;
        size_t keep = 0;
        while (keep < n) {
            cum += probs_[keep++];
            if (cum >= want) break;
        }
        n = keep;
        total = 0.0;
        for (size_t i = 0; i < keep; ++i) total += probs_[i];
    }
    if (p_.min_p > 0.0f) {
        // p_i / p_max = exp(l_i - l_max) is independent of normalisation; probs_[0] == 1 is the max.
        size_t keep = 1;
        while (keep < n && probs_[keep] >= static_cast<double>(p_.min_p)) ++keep;
        total = 0.0;
        for (size_t i = 0; i < keep; ++i) total += probs_[i];
        n = keep;
    }

    // Draw u in [0, total) with 53 random bits and walk the kept candidates.
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
    double cum = 0.0;
    int32_t chosen = ids_[n - 1];
    for (size_t i = 0; i < n; ++i) {
        cum += probs_[i];
        if (u < cum) {
            chosen = ids_[i];
            break;
        }
    }
    // Report the truncation in place: everything outside the kept set becomes -inf.
    for (size_t i = n; i < ids_.size(); ++i) logits[ids_[i]] = kNegInf;
    return chosen;
}

void log_softmax(const float* logits, int64_t n, std::vector<float>& out) {
    out.resize(static_cast<size_t>(n));
    if (n == 0) return;
    double mx = logits[0];
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
    const double lse = mx + std::log(sum);
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<float>(static_cast<double>(logits[i]) - lse);
}

std::vector<std::pair<int32_t, float>> top_logprobs(const std::vector<float>& logprobs, int n) {
    const size_t k = std::min(static_cast<size_t>(std::max(n, 0)), logprobs.size());
    std::vector<int32_t> ids(logprobs.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    auto before = [&](int32_t a, int32_t b) {
        return logprobs[static_cast<size_t>(a)] > logprobs[static_cast<size_t>(b)] ||
               (logprobs[static_cast<size_t>(a)] == logprobs[static_cast<size_t>(b)] && a < b);
    };
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), before);
    std::vector<std::pair<int32_t, float>> out;
    out.reserve(k);
    for (size_t i = 0; i < k; ++i) out.emplace_back(ids[i], logprobs[static_cast<size_t>(ids[i])]);
    return out;
}

}  // namespace grimoire
