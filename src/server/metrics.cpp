#include "server/metrics.h"

#include <cstdio>

namespace grimoire::server {

namespace {

constexpr const char* kRouteNames[] = {"chat_completions", "completions", "tokenize", "detokenize",
                                       "models",           "health",      "metrics",  "other"};

std::string num(double x) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", x);
    return buf;
}

}  // namespace

void Histogram::observe(double s) {
    size_t i = 0;
    while (i < kBounds.size() && s > kBounds[i]) ++i;
    buckets_[i].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(s, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    uint64_t cum = 0;
    for (size_t i = 0; i <= kBounds.size(); ++i) {
        cum += buckets_[i].load(std::memory_order_relaxed);
        const std::string le = i < kBounds.size() ? num(kBounds[i]) : "+Inf";
        out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cum) + "\n";
    }
    out += name + "_sum " + num(sum_.load(std::memory_order_relaxed)) + "\n";
    out += name + "_count " + std::to_string(count_.load(std::memory_order_relaxed)) + "\n";
}

void Metrics::count_request(Route route, int status) {
    size_t s = kStatuses.size() - 1;
    for (size_t i = 0; i + 1 < kStatuses.size(); ++i)
        if (kStatuses[i] == status) s = i;
    requests_[size_t(route)][s].fetch_add(1, std::memory_order_relaxed);
}

std::string Metrics::render(size_t queue_depth) const {
    std::string out;
    out += "# HELP grimoire_requests_total HTTP requests by route and status.\n";
    out += "# TYPE grimoire_requests_total counter\n";
    for (size_t r = 0; r < size_t(Route::COUNT); ++r)
        for (size_t s = 0; s < kStatuses.size(); ++s) {
            const uint64_t n = requests_[r][s].load(std::memory_order_relaxed);
            if (n == 0) continue;  // Prometheus clients treat a missing series as 0
            const std::string status = kStatuses[s] ? std::to_string(kStatuses[s]) : "other";
            out += std::string("grimoire_requests_total{route=\"") + kRouteNames[r] + "\",status=\"" + status +
                   "\"} " + std::to_string(n) + "\n";
        }
    out += "# HELP grimoire_prompt_tokens_total Prompt tokens processed.\n";
    out += "# TYPE grimoire_prompt_tokens_total counter\n";
    out += "grimoire_prompt_tokens_total " + std::to_string(prompt_tokens_.load()) + "\n";
    out += "# HELP grimoire_generation_tokens_total Tokens generated.\n";
    out += "# TYPE grimoire_generation_tokens_total counter\n";
    out += "grimoire_generation_tokens_total " + std::to_string(generated_tokens_.load()) + "\n";
    out += "# HELP grimoire_engine_tokens_total Tokens the engine sampled, including for clients that left.\n";
    out += "# TYPE grimoire_engine_tokens_total counter\n";
    out += "grimoire_engine_tokens_total " + std::to_string(engine_tokens_.load()) + "\n";
    out += "# HELP grimoire_cancelled_requests_total Requests cancelled (client gone, stop string, shutdown).\n";
    out += "# TYPE grimoire_cancelled_requests_total counter\n";
    out += "grimoire_cancelled_requests_total " + std::to_string(cancelled_.load()) + "\n";
    out += "# HELP grimoire_queue_depth Requests waiting for the engine.\n# TYPE grimoire_queue_depth gauge\n";
    out += "grimoire_queue_depth " + std::to_string(queue_depth) + "\n";
    out += "# HELP grimoire_requests_running Requests being generated.\n# TYPE grimoire_requests_running gauge\n";
    out += "grimoire_requests_running " + std::to_string(running_.load()) + "\n";
    ttft.render(out, "grimoire_time_to_first_token_seconds", "Time from request arrival to the first token.");
    itl.render(out, "grimoire_inter_token_latency_seconds", "Time between consecutive generated tokens.");
    e2e.render(out, "grimoire_request_duration_seconds", "Time from request arrival to the last token.");
    return out;
}

}  // namespace grimoire::server
