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
#include <map>
#include <set>
#include <string>
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
    explicit StepGraph(cudaStream_t stream);
    ~StepGraph();
    StepGraph(const StepGraph&) = delete;
    StepGraph& operator=(const StepGraph&) = delete;

    bool enabled() const { return enabled_; }
    void set_enabled(bool on);
    // See check_replay. Graphs captured while off are not checked (their nodes were not kept).
    void set_check(bool on);
    bool pending() const { return !ops_.empty(); }
    size_t pending_ops() const { return ops_.size(); }
    // With graphs disabled the op runs immediately; otherwise it is recorded until flush(). `tag` names the
    // op in the profile (a string that outlives the step: a literal or intern()).
    void record(uint64_t key, Fn fn, const char* tag = "op");
    void record(const char* tag, uint64_t key, Fn fn) { record(key, std::move(fn), tag); }
    void flush();
    void clear_cache();
    // For ops that extend their last recorded launch (CudaBackend::zero joins consecutive fills): whether
    // records wait for flush() (graphs on or profiling), a count of record() and flush() calls that never
    // goes back (unchanged since an op's record: that launch is still the last one and has not run), and
    // amend() mixing the extension's key into the step's key.
    bool deferred() const { return enabled_ || profiling_; }
    uint64_t epoch() const { return epoch_; }
    void amend(uint64_t key) { hash_.add(key); }

    struct Stats {
        int64_t direct_steps = 0, captures = 0, replays = 0;
        int64_t checked = 0, check_mismatches = 0;  // GRIMOIRE_GRAPH_CHECK=1 (see check_replay)
    };
    const Stats& stats() const { return stats_; }

    // Per-op device time, for attributing a step (GRIMOIRE_PROFILE_OPS=1 or set_profiling): every flushed
    // step then runs directly (no graph) with an event between consecutive ops, and the time from one event
    // to the next is charged to the op's tag. The GPU must not wait for the host for the figures to be device
    // times: launches are queued faster than the kernels run for the large ops this is for.
    void set_profiling(bool on);
    bool profiling() const { return profiling_; }
    const char* intern(const std::string& s) { return profiling_ ? intern_.insert(s).first->c_str() : "op"; }
    // "tag: calls, total ms, ms per call" by total time, then clears the accumulated figures.
    std::string profile_report();

    // Benchmark-only ablation (wrong results, right timing of what is left): GRIMOIRE_SKIP_OPS=tag,tag drops
    // every op whose tag (up to its first space) is listed; GRIMOIRE_KEEP_OPS=tag,tag drops every other op.
    // Read once at construction; attributes a replayed graph step's time to op classes, which per-op events
    // (direct launches, no PDL overlap) cannot.
    bool dropped(const char* tag) const;

  private:
    struct Entry {
        int seen = 0;
        cudaGraphExec_t exec = nullptr;
        bool uncapturable = false;
        // GRIMOIRE_GRAPH_CHECK=1 only: the captured graph, and the node count after each op (op_end[i]: nodes
        // of ops 0..i), for naming the op of a node that differs.
        cudaGraph_t graph = nullptr;
        std::vector<size_t> op_end;
    };
    void run_direct();
    void run_profiled();
    // Captures ops_ into a graph (nullptr where something cannot be captured); with op_end, the node count
    // after each op.
    cudaGraph_t capture(std::vector<size_t>* op_end);
    // GRIMOIRE_GRAPH_CHECK=1, a debugging mode (slow: every replay is a capture too): before a cached graph
    // is replayed, the step's ops are captured again and every node compared with the cached graph's (kernel:
    // function, grid, block, shared memory and the argument bytes; copy and fill: pointers and sizes; event
    // record: the event). A difference means the ops' keys left out something the launches depend on, so
    // the replay would run stale parameters: it is printed with the op's tag and the fresh capture replaces
    // the cached one.
    void check_replay(Entry& e, uint64_t key);
    bool check_ = false;

    cudaStream_t stream_;
    bool enabled_ = true;
    uint64_t epoch_ = 0;
    std::vector<Fn> ops_;
    KeyHasher hash_;
    std::unordered_map<uint64_t, Entry> cache_;
    Stats stats_;
    bool profiling_ = false;
    std::vector<const char*> tags_;
    std::vector<cudaEvent_t> events_;
    std::set<std::string> intern_;
    struct Acc {
        int64_t calls = 0;
        double ms = 0;
    };
    std::map<std::string, Acc> prof_;
    std::set<std::string> skip_, keep_;
};

}  // namespace grimoire::cuda
