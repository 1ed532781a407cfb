// Sampler: greedy ties, seeded determinism, the empirical distribution against softmax (chi-square),
// exact top-k / top-p / min-p truncation, exact penalties, log-softmax and top logprobs.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "core/error.h"
#include "sample/sampler.h"

namespace grimoire {
namespace {

std::vector<double> softmax(const std::vector<float>& l, double temp) {
    double mx = -1e300, s = 0.0;
    for (float v : l) mx = std::max(mx, v / temp);
    std::vector<double> p(l.size());
    for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp(l[i] / temp - mx);
    for (double& v : p) v /= s;
    return p;
}

// Draws n samples; returns the counts per id.
std::vector<int> draw(const SamplingParams& sp, const std::vector<float>& logits, int n) {
    Sampler s(sp, static_cast<int64_t>(logits.size()));
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n; ++i) {
        std::vector<float> l = logits;
        ++counts[static_cast<size_t>(s.sample(l.data(), std::span<const int32_t>{}))];
    }
    return counts;
}

// Pearson chi-square of counts against expected probabilities (ids with p == 0 must never appear).
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n, int* dof) {
    double chi = 0.0;
    *dof = -1;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] == 0.0) {
            EXPECT_EQ(counts[i], 0) << "id " << i << " should be truncated";
            continue;
        }
        const double e = p[i] * n;
        chi += (counts[i] - e) * (counts[i] - e) / e;
        ++*dof;
    }
    return chi;
}

// 0.999 quantiles of chi-square (a fixed seed makes the test deterministic; this bound is what a correct
// sampler passes with probability 0.999 for an arbitrary seed).
double chi_crit(int dof) {
    static const std::map<int, double> q = {{1, 10.83}, {2, 13.82}, {3, 16.27}, {4, 18.47}, {5, 20.52}, {7, 24.32}};
    return q.at(dof);
}

const std::vector<float> kLogits = {1.0f, 2.5f, 0.3f, -1.0f, 2.0f, 0.0f, 1.7f, -0.5f};

TEST(Sampler, GreedyPicksLowestIdOnTies) {
    SamplingParams p;
    p.temperature = 0.0f;
    Sampler s(p, 5);
    std::vector<float> l = {0.1f, 3.0f, -2.0f, 3.0f, 1.0f};
    EXPECT_EQ(s.sample(l.data(), std::span<const int32_t>{}), 1);
    EXPECT_TRUE(s.greedy());
    EXPECT_EQ(argmax(l.data(), 5), 1);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> n = {nan, -1.0f, nan, -0.5f};  // NaN never wins, even at index 0
    EXPECT_EQ(argmax(n.data(), 4), 3);
}

TEST(Sampler, SeededIsDeterministic) {
    SamplingParams p;
    p.seed = 1234;
    p.has_seed = true;
    Sampler a(p, 8), b(p, 8);
    p.seed = 1235;
    Sampler c(p, 8);
    int differ = 0;
    for (int i = 0; i < 200; ++i) {
        std::vector<float> la = kLogits, lb = kLogits, lc = kLogits;
        const int32_t x = a.sample(la.data(), std::span<const int32_t>{});
        EXPECT_EQ(x, b.sample(lb.data(), std::span<const int32_t>{}));
        differ += x != c.sample(lc.data(), std::span<const int32_t>{});
    }
    EXPECT_GT(differ, 20);
}

TEST(Sampler, DistributionMatchesSoftmaxWithTemperature) {
    for (float temp : {1.0f, 0.7f, 1.6f}) {
        SamplingParams p;
        p.temperature = temp;
        p.has_seed = true;
        p.seed = 7;
        const int n = 40000;
        const auto counts = draw(p, kLogits, n);
        int dof;
        const double chi = chi_square(counts, softmax(kLogits, temp), n, &dof);
        EXPECT_EQ(dof, 7);
        EXPECT_LT(chi, chi_crit(dof)) << "temperature " << temp;
    }
}

TEST(Sampler, TopKKeepsExactlyKAndRenormalises) {
    SamplingParams p;
    p.top_k = 3;
    p.has_seed = true;
    p.seed = 3;
    // Top 3 of kLogits: ids 1 (2.5), 4 (2.0), 6 (1.7).
    std::vector<double> want(kLogits.size(), 0.0);
    const double z = std::exp(2.5) + std::exp(2.0) + std::exp(1.7);
    want[1] = std::exp(2.5) / z;
    want[4] = std::exp(2.0) / z;
    want[6] = std::exp(1.7) / z;
    const int n = 30000;
    int dof;
    EXPECT_LT(chi_square(draw(p, kLogits, n), want, n, &dof), chi_crit(2));
    EXPECT_EQ(dof, 2);
    // In place: exactly the kept tokens stay finite; ties at the boundary keep the lower id.
    std::vector<float> tie = {1.0f, 3.0f, 2.0f, 2.0f, 2.0f};
    p.top_k = 2;
    Sampler s(p, 5);
    s.sample(tie.data(), std::span<const int32_t>{});
    EXPECT_EQ(tie, (std::vector<float>{-INFINITY, 3.0f, 2.0f, -INFINITY, -INFINITY}));
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
    // Probabilities 0.5, 0.3, 0.15, 0.05 (as logits of their logs).
    const std::vector<float> l = {std::log(0.3f), std::log(0.05f), std::log(0.5f), std::log(0.15f)};
    SamplingParams p;
    p.has_seed = true;
    p.seed = 11;
    p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8: keeps ids 2 and 0
    const int n = 30000;
    int dof;
    EXPECT_LT(chi_square(draw(p, l, n), {0.3 / 0.8, 0.0, 0.5 / 0.8, 0.0}, n, &dof), chi_crit(1));
    p.top_p = 0.9f;  // 0.8 < 0.9 <= 0.95: adds id 3
    EXPECT_LT(chi_square(draw(p, l, n), {0.3 / 0.95, 0.0, 0.5 / 0.95, 0.15 / 0.95}, n, &dof), chi_crit(2));
    p.top_p = 0.3f;  // the top token alone already reaches p
    const auto c = draw(p, l, 1000);
    EXPECT_EQ(c[2], 1000);
}

TEST(Sampler, MinPDropsTokensBelowFractionOfMax) {
    const std::vector<float> l = {std::log(0.3f), std::log(0.05f), std::log(0.5f), std::log(0.15f)};
    SamplingParams p;
    p.has_seed = true;
    p.seed = 5;
    p.min_p = 0.2f;  // threshold 0.1: drops id 1 (0.05)
    std::vector<float> x = l;
    Sampler s(p, 4);
    s.sample(x.data(), std::span<const int32_t>{});
    EXPECT_TRUE(std::isinf(x[1]) && x[1] < 0);
    EXPECT_EQ(x[0], l[0]);
    EXPECT_EQ(x[3], l[3]);
    const int n = 30000;
    int dof;
    EXPECT_LT(chi_square(draw(p, l, n), {0.3 / 0.95, 0.0, 0.5 / 0.95, 0.15 / 0.95}, n, &dof), chi_crit(2));
    // min-p after top-k: top_k 2 keeps {2, 0}; min_p 0.7 then drops id 0 (0.3 / 0.5 = 0.6 < 0.7).
    p.top_k = 2;
    p.min_p = 0.7f;
    EXPECT_EQ(draw(p, l, 500)[2], 500);
}

// The kept set for top-p then min-p, by brute force over the whole sorted vocabulary.
std::vector<bool> ref_kept(const std::vector<float>& l, float top_p, float min_p) {
    std::vector<int32_t> ids(l.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    const double mx = l[ids[0]];
    double total = 0.0;
    for (float v : l) total += std::exp(v - mx);
    std::vector<bool> keep(l.size(), false);
    double cum = 0.0;
    for (int32_t id : ids) {
        const double p = std::exp(l[id] - mx);
        if (min_p > 0.0f && p < min_p) break;
        keep[id] = true;
        cum += p;
        if (top_p < 1.0f && cum >= top_p * total) break;
    }
    return keep;
}

TEST(Sampler, LargeVocabTruncationMatchesFullSort) {
    const int64_t V = 5000;
    std::mt19937 rng(17);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> peaked(V), flat(V);
    for (auto& v : peaked) v = nd(rng);
    for (auto& v : flat) v = nd(rng) * 0.01f;  // needs > 1024 tokens for most top_p: the full-sort fallback
    for (const auto* base : {&peaked, &flat})
        for (float top_p : {0.5f, 0.9f, 0.999f, 1.0f})
            for (float min_p : {0.0f, 0.01f, 0.9999f}) {
                if (top_p == 1.0f && min_p == 0.0f) continue;
                SamplingParams p;
                p.top_p = top_p;
                p.min_p = min_p;
                p.has_seed = true;
                Sampler s(p, V);
                std::vector<float> l = *base;
                const int32_t id = s.sample(l.data(), std::span<const int32_t>{});
                const std::vector<bool> want = ref_kept(*base, top_p, min_p);
                size_t nkeep = 0;
                for (int64_t i = 0; i < V; ++i) {
                    ASSERT_EQ(std::isfinite(l[i]), want[i]) << "id " << i << " top_p " << top_p << " min_p " << min_p;
                    nkeep += want[i];
                }
                EXPECT_TRUE(want[id]);
                EXPECT_GT(nkeep, 0u);
            }
    // A flat 20k vocabulary: the sorted prefix grows 1024 -> 8192 (top_p 0.3 stops there) -> everything (0.5).
    std::vector<float> wide(20000);
    for (auto& v : wide) v = nd(rng) * 0.01f;
    for (float top_p : {0.3f, 0.5f}) {
        SamplingParams p;
        p.top_p = top_p;
        p.has_seed = true;
        Sampler s(p, 20000);
        std::vector<float> l = wide;
        s.sample(l.data(), std::span<const int32_t>{});
        const std::vector<bool> want = ref_kept(wide, top_p, 0.0f);
        size_t nkeep = 0;
        for (size_t i = 0; i < wide.size(); ++i) {
            ASSERT_EQ(std::isfinite(l[i]), want[i]) << "id " << i << " top_p " << top_p;
            nkeep += want[i];
        }
        EXPECT_GT(nkeep, 1024u * (top_p > 0.4f ? 8 : 1));
    }
}

TEST(Sampler, PenaltiesAreExact) {
    SamplingParams p;
    p.temperature = 0.0f;  // greedy: the logits left in place are exactly the penalised ones
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    Sampler s(p, 6);
    std::vector<float> l = {1.0f, -1.0f, 4.0f, 0.5f, -2.0f, 3.0f};
    const std::vector<int32_t> prompt = {0, 1, 1};
    const std::vector<int32_t> gen = {2, 2, 4, 2};
    const int32_t id = s.sample(l.data(), prompt, gen);
    // 0: prompt only -> 1/2. 1: prompt only, negative -> -2. 2: generated x3 -> 4/2 - 0.5 - 0.75.
    // 3: unseen. 4: generated x1, negative -> -4 - 0.5 - 0.25. 5: unseen.
    EXPECT_EQ(l, (std::vector<float>{0.5f, -2.0f, 0.75f, 0.5f, -4.75f, 3.0f}));
    EXPECT_EQ(id, 5);
    // The single-history form splits at prompt_len.
    Sampler s2(p, 6, 3);
    std::vector<float> l2 = {1.0f, -1.0f, 4.0f, 0.5f, -2.0f, 3.0f};
    const std::vector<int32_t> hist = {0, 1, 1, 2, 2, 4, 2};
    s2.sample(l2.data(), hist);
    EXPECT_EQ(l2, l);
}

TEST(Sampler, TemperatureScalesInPlace) {
    SamplingParams p;
    p.temperature = 0.5f;
    p.has_seed = true;
    Sampler s(p, 3);
    std::vector<float> l = {1.0f, -0.5f, 0.25f};
    s.sample(l.data(), std::span<const int32_t>{});
    EXPECT_EQ(l, (std::vector<float>{2.0f, -1.0f, 0.5f}));
}

TEST(Sampler, RejectsInvalidParams) {
    SamplingParams p;
    p.top_p = 0.0f;
    EXPECT_THROW(Sampler(p, 4), Error);
    p = {};
    p.temperature = -1.0f;
    EXPECT_THROW(Sampler(p, 4), Error);
    p = {};
    p.repetition_penalty = 0.0f;
    EXPECT_THROW(Sampler(p, 4), Error);
}

TEST(LogProbs, LogSoftmaxAndTop) {
    const std::vector<float> l = {1.0f, 3.0f, 3.0f, -2.0f, 0.0f};
    std::vector<float> lp;
    log_softmax(l.data(), 5, lp);
    double z = 0.0;
    for (float v : l) z += std::exp(static_cast<double>(v));
    for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(lp[i], l[i] - std::log(z), 1e-6);
    const auto top = top_logprobs(lp, 3);
    ASSERT_EQ(top.size(), 3u);
    EXPECT_EQ(top[0].first, 1);
    EXPECT_EQ(top[1].first, 2);
    EXPECT_EQ(top[2].first, 0);
    EXPECT_FLOAT_EQ(top[2].second, lp[0]);
    EXPECT_EQ(top_logprobs(lp, 9).size(), 5u);
    EXPECT_TRUE(top_logprobs(lp, 0).empty());
}

}  // namespace
}  // namespace grimoire
