#include "backend/cuda/step_graph.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_util.h"

namespace grimoire::cuda {

namespace {
// Distinct steps (or prompt segments, see CudaBackend::matmul) kept instantiated: decode + a few prompt
// lengths.
constexpr size_t kMaxGraphs = 256;
}  // namespace

KeyHasher& KeyHasher::addf(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return add(static_cast<uint64_t>(u));
}

KeyHasher& KeyHasher::add(const Tensor& t) {
    add(t.data).add(static_cast<uint64_t>(t.dtype)).add(static_cast<uint64_t>(t.ndim));
    for (int i = 0; i < t.ndim; ++i) add(static_cast<uint64_t>(t.shape[i]));
    return *this;
}

namespace {
std::set<std::string> tag_list(const char* env) {
    std::set<std::string> out;
    const char* v = std::getenv(env);
    if (!v) return out;
    std::string s(v);
    for (size_t a = 0; a <= s.size();) {
        const size_t b = std::min(s.find(',', a), s.size());
        if (b > a) out.insert(s.substr(a, b - a));
        a = b + 1;
    }
    return out;
}
}  // namespace

StepGraph::StepGraph(cudaStream_t stream)
    : stream_(stream), skip_(tag_list("GRIMOIRE_SKIP_OPS")), keep_(tag_list("GRIMOIRE_KEEP_OPS")) {
    if (const char* e = std::getenv("GRIMOIRE_PROFILE_OPS"); e && std::strcmp(e, "1") == 0) profiling_ = true;
    if (!skip_.empty() || !keep_.empty())
        std::fprintf(stderr,
                     "grimoire: GRIMOIRE_SKIP_OPS / GRIMOIRE_KEEP_OPS set: ops are dropped, results are "
                     "wrong (a benchmark ablation)\n");
}

bool StepGraph::dropped(const char* tag) const {
    if (skip_.empty() && keep_.empty()) return false;
    const char* sp = std::strchr(tag, ' ');
    const std::string t = sp ? std::string(tag, static_cast<size_t>(sp - tag)) : std::string(tag);
    return skip_.count(t) > 0 || (!keep_.empty() && keep_.count(t) == 0);
}

StepGraph::~StepGraph() {
    clear_cache();
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void StepGraph::set_profiling(bool on) {
    flush();
    profiling_ = on;
}

void StepGraph::set_enabled(bool on) {
    flush();
    enabled_ = on;
}

void StepGraph::record(uint64_t key, Fn fn, const char* tag) {
    ++epoch_;
    if (dropped(tag)) return;
    if (profiling_) tags_.push_back(tag);
    if (!enabled_ && !profiling_) {
        fn(stream_);
        return;
    }
    hash_.add(key);
    ops_.push_back(std::move(fn));
}

void StepGraph::run_direct() {
    for (auto& f : ops_) f(stream_);
    ++stats_.direct_steps;
}

void StepGraph::run_profiled() {
    while (events_.size() < ops_.size() + 1) {
        cudaEvent_t e;
        GRIMOIRE_CUDA_CHECK(cudaEventCreate(&e));
        events_.push_back(e);
    }
    for (size_t i = 0; i < ops_.size(); ++i) {
        GRIMOIRE_CUDA_CHECK(cudaEventRecord(events_[i], stream_));
        ops_[i](stream_);
    }
    GRIMOIRE_CUDA_CHECK(cudaEventRecord(events_[ops_.size()], stream_));
    GRIMOIRE_CUDA_CHECK(cudaEventSynchronize(events_[ops_.size()]));
    for (size_t i = 0; i < ops_.size(); ++i) {
        float ms = 0;
        GRIMOIRE_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
        Acc& a = prof_[i < tags_.size() ? tags_[i] : "?"];
        a.calls++;
        a.ms += ms;
    }
    ++stats_.direct_steps;
}

std::string StepGraph::profile_report() {
    flush();
    std::vector<std::pair<std::string, Acc>> v(prof_.begin(), prof_.end());
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double total = 0;
    for (const auto& [t, a] : v) total += a.ms;
    std::string out;
    char line[256];
    std::snprintf(line, sizeof line, "%-48s %6s %10s %10s\n", "op", "calls", "total ms", "ms/call");
    out += line;
    for (const auto& [t, a] : v) {
        std::snprintf(line, sizeof line, "%-48s %6lld %10.3f %10.4f\n", t.c_str(),
                      static_cast<long long>(a.calls), a.ms, a.ms / static_cast<double>(a.calls));
        out += line;
    }
    std::snprintf(line, sizeof line, "%-48s %6s %10.3f\n", "sum", "", total);
    out += line;
    prof_.clear();
    return out;
}

void StepGraph::flush() {
    ++epoch_;
    if (ops_.empty()) return;
    if (profiling_) {  // recorded even with graphs off (see record)
        run_profiled();
        ops_.clear();
        tags_.clear();
        hash_ = KeyHasher{};
        return;
    }
    const uint64_t key = hash_.add(static_cast<uint64_t>(ops_.size())).h;
    Entry& e = cache_[key];
    if (e.exec) {
        GRIMOIRE_CUDA_CHECK(cudaGraphLaunch(e.exec, stream_));
        ++stats_.replays;
    } else if (e.seen == 0 || e.uncapturable) {
        run_direct();
        e.seen++;
    } else {
        if (cache_.size() > kMaxGraphs) {
            clear_cache();
            cache_[key].seen = 1;
        }
        Entry& en = cache_[key];
        cudaGraph_t graph = nullptr;
        GRIMOIRE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        bool ok = true;
        try {
            for (auto& f : ops_) f(stream_);
        } catch (...) {
            ok = false;
        }
        const cudaError_t ec = cudaStreamEndCapture(stream_, &graph);
        if (ok && ec == cudaSuccess && graph && cudaGraphInstantiate(&en.exec, graph, 0) == cudaSuccess) {
            ++stats_.captures;
            cudaGraphDestroy(graph);
            GRIMOIRE_CUDA_CHECK(cudaGraphLaunch(en.exec, stream_));
        } else {
            // Something in the step cannot be captured: remember that and run this and later ones directly.
            if (graph) cudaGraphDestroy(graph);
            cudaGetLastError();
            en.exec = nullptr;
            en.uncapturable = true;
            run_direct();
        }
    }
    ops_.clear();
    hash_ = KeyHasher{};
}

void StepGraph::clear_cache() {
    for (auto& [k, e] : cache_)
        if (e.exec) cudaGraphExecDestroy(e.exec);
    cache_.clear();
}

}  // namespace grimoire::cuda
