// Records the kernels of one forward step and runs them as a CUDA graph once the same step repeats.
//
// The backend's ops do not launch at once: each is recorded as a closure with a key (op, device pointers,
// shapes, scalar parameters; NOT the values that change per step, which kernels read from device memory
// filled by host-to-device copies out of pinned memory). flush() — at the first host sync point of the step —
// hashes the keys: a sequence seen for the first time runs directly; seen a second time it is captured and
// instantiated; from then on the instantiated graph is replayed with one launch. A decode step therefore
// runs directly once, is captured at the second token and replayed at every later one, at any length.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace grimoire::cuda {

// FNV-style accumulation of what identifies a launch.
struct KeyHasher {
    uint64_t h = 1469598103934665603ull;
    KeyHasher& add(uint64_t v) {
        h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h *= 1099511628211ull;
        return *this;
    }
    KeyHasher& add(const void* p) { return add(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))); }
    KeyHasher& addf(float f);
    KeyHasher& add(const Tensor& t);
};

class StepGraph {
public:
    using Fn = std::function<void(cudaStream_t)>;
    explicit StepGraph(cudaStream_t stream) : stream_(stream) {}
    ~StepGraph() { clear_cache(); }
    StepGraph(const StepGraph&) = delete;
    StepGraph& operator=(const StepGraph&) = delete;

    bool enabled() const { return enabled_; }
    void set_enabled(bool on);
    bool pending() const { return !ops_.empty(); }
    // With graphs disabled the op runs immediately; otherwise it is recorded until flush().
    void record(uint64_t key, Fn fn);
    void flush();
    void clear_cache();

    struct Stats {
        int64_t direct_steps = 0, captures = 0, replays = 0;
    };
    const Stats& stats() const { return stats_; }

private:
    struct Entry {
        int seen = 0;
        cudaGraphExec_t exec = nullptr;
        bool uncapturable = false;
    };
    void run_direct();

    cudaStream_t stream_;
    bool enabled_ = true;
    std::vector<Fn> ops_;
    KeyHasher hash_;
    std::unordered_map<uint64_t, Entry> cache_;
    Stats stats_;
};

}  // namespace grimoire::cuda
