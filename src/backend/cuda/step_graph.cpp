#include "backend/cuda/step_graph.h"

#include <cuda.h>

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
    if (const char* e = std::getenv("GRIMOIRE_GRAPH_CHECK"); e && std::strcmp(e, "1") == 0) {
        check_ = true;
        std::fprintf(
            stderr,
            "grimoire: GRIMOIRE_GRAPH_CHECK=1: every graph replay is checked against a fresh capture "
            "(slow; a debugging mode)\n");
    }
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

void StepGraph::set_check(bool on) {
    flush();
    check_ = on;
}

void StepGraph::set_enabled(bool on) {
    flush();
    enabled_ = on;
}

void StepGraph::record(uint64_t key, Fn fn, const char* tag) {
    ++epoch_;
    if (dropped(tag)) return;
    if (profiling_ || (check_ && enabled_)) tags_.push_back(tag);
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
        if (check_) check_replay(e, key);
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
        std::vector<size_t> op_end;
        cudaGraph_t graph = capture(check_ ? &op_end : nullptr);
        if (graph && cudaGraphInstantiate(&en.exec, graph, 0) == cudaSuccess) {
            ++stats_.captures;
            if (check_) {
                en.graph = graph, en.op_end = std::move(op_end);
            } else {
                cudaGraphDestroy(graph);
            }
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
    tags_.clear();
    hash_ = KeyHasher{};
}

cudaGraph_t StepGraph::capture(std::vector<size_t>* op_end) {
    cudaGraph_t graph = nullptr;
    GRIMOIRE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    bool ok = true;
    try {
        for (auto& f : ops_) {
            f(stream_);
            if (!op_end) continue;
            cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
            cudaGraph_t g = nullptr;
            size_t n = 0;
            if (cudaStreamGetCaptureInfo(stream_, &cs, nullptr, &g) == cudaSuccess && g)
                cudaGraphGetNodes(g, nullptr, &n);
            op_end->push_back(n);
        }
    } catch (...) {
        ok = false;
    }
    const cudaError_t ec = cudaStreamEndCapture(stream_, &graph);
    if (!ok || ec != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        return nullptr;
    }
    return graph;
}

namespace {
// What a node does, as text to compare: type, and for kernels the function, launch shape and argument bytes
// (their sizes from the driver's cuFuncGetParamInfo, reached through the runtime's entry-point query so no
// libcuda link is needed), for copies and fills the pointers and sizes, for event records the event.
std::string describe(cudaGraphNode_t node) {
    using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
    using ParamInfo = CUresult (*)(CUfunction, size_t, size_t*, size_t*);
    using KernelFn = CUresult (*)(CUfunction*, CUkernel);
    static GetParams get_params = nullptr;
    static ParamInfo param_info = nullptr;
    static KernelFn kernel_fn = nullptr;
    static const bool resolved = [] {
        cudaGetDriverEntryPointByVersion("cuGraphKernelNodeGetParams", reinterpret_cast<void**>(&get_params),
                                         12000, cudaEnableDefault, nullptr);
        cudaGetDriverEntryPointByVersion("cuFuncGetParamInfo", reinterpret_cast<void**>(&param_info), 12040,
                                         cudaEnableDefault, nullptr);
        cudaGetDriverEntryPointByVersion("cuKernelGetFunction", reinterpret_cast<void**>(&kernel_fn), 12000,
                                         cudaEnableDefault, nullptr);
        cudaGetLastError();
        return true;
    }();
    (void)resolved;
    char buf[256];
    cudaGraphNodeType type{};
    cudaGraphNodeGetType(node, &type);
    std::string out = "type " + std::to_string(static_cast<int>(type));
    if (type == cudaGraphNodeTypeKernel && get_params) {
        CUDA_KERNEL_NODE_PARAMS p{};
        if (get_params(node, &p) != CUDA_SUCCESS) return out + " (params unreadable)";
        CUfunction fn = p.func;
        if (!fn && p.kern && kernel_fn) kernel_fn(&fn, p.kern);
        std::snprintf(buf, sizeof buf, " kernel %p grid %u,%u,%u block %u,%u,%u smem %u args",
                      static_cast<void*>(fn), p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY,
                      p.blockDimZ, p.sharedMemBytes);
        out += buf;
        if (fn && param_info && p.kernelParams) {
            for (size_t i = 0;; ++i) {
                size_t off = 0, size = 0;
                if (param_info(fn, i, &off, &size) != CUDA_SUCCESS) break;
                out += i ? "|" : " ";
                const auto* b = static_cast<const unsigned char*>(p.kernelParams[i]);
                for (size_t j = 0; j < size; ++j) {
                    std::snprintf(buf, sizeof buf, "%02x", b[j]);
                    out += buf;
                }
            }
        }
    } else if (type == cudaGraphNodeTypeMemcpy) {
        cudaMemcpy3DParms m{};
        cudaGraphMemcpyNodeGetParams(node, &m);
        std::snprintf(buf, sizeof buf, " copy %p -> %p extent %zu,%zu,%zu kind %d", m.srcPtr.ptr,
                      m.dstPtr.ptr, m.extent.width, m.extent.height, m.extent.depth,
                      static_cast<int>(m.kind));
        out += buf;
    } else if (type == cudaGraphNodeTypeMemset) {
        cudaMemsetParams m{};
        cudaGraphMemsetNodeGetParams(node, &m);
        std::snprintf(buf, sizeof buf, " fill %p value %u elem %u width %zu height %zu pitch %zu", m.dst,
                      m.value, m.elementSize, m.width, m.height, m.pitch);
        out += buf;
    } else if (type == cudaGraphNodeTypeEventRecord) {
        cudaEvent_t ev = nullptr;
        cudaGraphEventRecordNodeGetEvent(node, &ev);
        std::snprintf(buf, sizeof buf, " record %p", static_cast<void*>(ev));
        out += buf;
    }
    cudaGetLastError();
    return out;
}

std::vector<std::string> describe_all(cudaGraph_t g) {
    size_t n = 0;
    cudaGraphGetNodes(g, nullptr, &n);
    std::vector<cudaGraphNode_t> nodes(n);
    if (n) cudaGraphGetNodes(g, nodes.data(), &n);
    std::vector<std::string> out;
    out.reserve(n);
    for (cudaGraphNode_t node : nodes) out.push_back(describe(node));
    return out;
}
}  // namespace

void StepGraph::check_replay(Entry& e, uint64_t key) {
    if (!e.graph) return;  // captured before the check was on
    std::vector<size_t> op_end;
    cudaGraph_t fresh = capture(&op_end);
    if (!fresh) return;
    ++stats_.checked;
    const std::vector<std::string> was = describe_all(e.graph), now = describe_all(fresh);
    auto op_of = [&](size_t node) {
        size_t i = 0;
        while (i < op_end.size() && op_end[i] <= node) ++i;
        return i;
    };
    // Printed: at most 8 nodes a step and 200 lines in all (a struct argument's padding bytes can differ from
    // one capture to the next and read as a difference: the lines say which argument to look at).
    static int printed = 0;
    int shown = 0;
    const size_t n = std::max(was.size(), now.size());
    for (size_t i = 0; i < n; ++i) {
        const std::string a = i < was.size() ? was[i] : "(none)", b = i < now.size() ? now[i] : "(none)";
        if (a == b) continue;
        const size_t op = op_of(i);
        if (++shown > 8 || ++printed > 200) continue;
        std::fprintf(
            stderr,
            "grimoire: graph check: step key %016llx, node %zu of %zu (op %zu '%s'): cached [%s], now [%s]\n",
            static_cast<unsigned long long>(key), i, now.size(), op, op < tags_.size() ? tags_[op] : "?",
            a.c_str(), b.c_str());
    }
    if (shown == 0) {
        cudaGraphDestroy(fresh);
        return;
    }
    ++stats_.check_mismatches;
    cudaGraphExec_t exec = nullptr;
    if (cudaGraphInstantiate(&exec, fresh, 0) != cudaSuccess) {
        cudaGetLastError();
        cudaGraphDestroy(fresh);
        return;
    }
    cudaGraphExecDestroy(e.exec);  // deferred by the driver while a launch of it is in flight
    cudaGraphDestroy(e.graph);
    e.exec = exec, e.graph = fresh, e.op_end = std::move(op_end);
}

void StepGraph::clear_cache() {
    for (auto& [k, e] : cache_) {
        if (e.exec) cudaGraphExecDestroy(e.exec);
        if (e.graph) cudaGraphDestroy(e.graph);
    }
    cache_.clear();
}

}  // namespace grimoire::cuda
