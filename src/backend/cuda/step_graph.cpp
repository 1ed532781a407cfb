#include "backend/cuda/step_graph.h"

#include <cstring>

#include "backend/cuda/cuda_util.h"

namespace grimoire::cuda {

namespace {
constexpr size_t kMaxGraphs = 64;  // distinct step shapes kept instantiated (decode + a few prefill lengths)
}

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

void StepGraph::set_enabled(bool on) {
    flush();
    enabled_ = on;
}

void StepGraph::record(uint64_t key, Fn fn) {
    if (!enabled_) {
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

void StepGraph::flush() {
    if (ops_.empty()) return;
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
        if (ok && ec == cudaSuccess && graph &&
            cudaGraphInstantiate(&en.exec, graph, 0) == cudaSuccess) {
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
