// Prometheus metrics for GET /metrics. Lock-free (atomics only): HTTP threads and the engine update them
// while another thread renders them, and all locking of the server stays in queue.cpp.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace grimoire::server {

enum class Route { CHAT, COMPLETIONS, TOKENIZE, DETOKENIZE, MODELS, HEALTH, METRICS, OTHER, COUNT };

class Histogram {
public:
    static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                       0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};
    void observe(double seconds);
    // Appends the _bucket / _sum / _count lines (cumulative buckets, as Prometheus expects).
    void render(std::string& out, const std::string& name, const std::string& help) const;

private:
    std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};  // last: +Inf
    std::atomic<double> sum_{0.0};
    std::atomic<uint64_t> count_{0};
};

class Metrics {
public:
    void count_request(Route route, int status);
    void add_prompt_tokens(int64_t n) { prompt_tokens_ += uint64_t(n); }
    void add_generated_tokens(int64_t n) { generated_tokens_ += uint64_t(n); }
    void set_running(int delta) { running_ += delta; }
    // Engine side: tokens it sampled (also for requests whose client left) and requests it cancelled.
    void add_engine_tokens(int64_t n) { engine_tokens_ += uint64_t(n); }
    void count_cancelled() { cancelled_ += 1; }

    Histogram ttft, itl, e2e;

    // The Prometheus text exposition (version 0.0.4); queue_depth is read from the queue by the caller.
    std::string render(size_t queue_depth) const;

private:
    static constexpr std::array<int, 8> kStatuses = {200, 400, 401, 404, 413, 500, 503, 0};  // 0: other
    std::array<std::array<std::atomic<uint64_t>, kStatuses.size()>, size_t(Route::COUNT)> requests_{};
    std::atomic<uint64_t> prompt_tokens_{0}, generated_tokens_{0}, engine_tokens_{0}, cancelled_{0};
    std::atomic<int> running_{0};
};

}  // namespace grimoire::server
