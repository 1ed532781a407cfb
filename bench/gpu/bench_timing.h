// What every GPU benchmark shares, nvcc-compilable (no JSON library): error checks, event timing, the
// device-to-device copy bandwidth they report ratios against, and the record's date / card fields.
// bench_util.h adds the nlohmann-built record for the .cpp benchmarks; the .cu ones write it with
// write_record_text.
#pragma once
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string>

#include "core/error.h"

namespace grimoire::bench {

inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Mean milliseconds of fn(i) over `reps` launches on the default stream, after 3 warm-up calls.
inline double time_ms(const std::function<void(int)>& fn, int reps) {
    for (int i = 0; i < 3; ++i) fn(i);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    for (int i = 0; i < reps; ++i) fn(i);
    cudaEventRecord(e1);
    check(cudaEventSynchronize(e1), "timing");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms / reps;
}

// Mean milliseconds of fn(i, s) over `reps` calls captured once into a CUDA graph and replayed (how the decode
// step runs its kernels: no host launch cost between them), after 3 warm replays; on stream s, or on a stream
// of its own when s is null.
inline double time_graph_ms(const std::function<void(int, cudaStream_t)>& fn, int reps, cudaStream_t s = nullptr) {
    cudaStream_t own = nullptr;
    if (s == nullptr) {
        check(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), "stream");
        s = own;
    }
    cudaGraph_t g = nullptr;
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
    for (int i = 0; i < reps; ++i) fn(i, s);
    check(cudaStreamEndCapture(s, &g), "capture");
    cudaGraphExec_t ge = nullptr;
    check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
    for (int i = 0; i < 3; ++i) cudaGraphLaunch(ge, s);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    constexpr int kReplays = 5;
    cudaEventRecord(e0, s);
    for (int r = 0; r < kReplays; ++r) cudaGraphLaunch(ge, s);
    cudaEventRecord(e1, s);
    check(cudaEventSynchronize(e1), "graph timing");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    if (own) cudaStreamDestroy(own);
    return ms / (kReplays * reps);
}

// Device-to-device copy bandwidth, (read + write) bytes / s, over a 4 GiB buffer: the roofline's denominator.
inline double copy_bandwidth() {
    const size_t n = 4ull << 30;
    void *a = nullptr, *b = nullptr;
    check(cudaMalloc(&a, n), "cudaMalloc");
    check(cudaMalloc(&b, n), "cudaMalloc");
    const double ms = time_ms([&](int) { cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice); }, 10);
    cudaFree(a);
    cudaFree(b);
    return 2.0 * n / (ms * 1e-3);
}

// "YYYY-MM-DDTHH:MMZ" now, and the card's name: the record's date and card.
inline std::string utc_minute() {
    const auto tnow = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%MZ", std::gmtime(&tnow));
    return date;
}
inline std::string card_name() {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    return prop.name;
}

// One "name": value member appended to a JSON member list (comma-separated, one per line).
inline void add_entry(std::string& list, const std::string& name, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4f", v);
    list += (list.empty() ? "\n    \"" : ",\n    \"") + name + "\": " + buf;
}

// The bench/results record from JSON member lists already formatted ("\n    \"name\": value" entries joined
// by commas; `metrics` gets copy_bandwidth_GBps first), written to out_path.
inline void write_record_text(const std::string& out_path,
                              const std::string& commit,
                              const std::string& command,
                              double copy_bw,
                              const std::string& metrics,
                              const std::string& ratios) {
    FILE* f = std::fopen(out_path.c_str(), "w");
    if (!f) throw Error("cannot write " + out_path);
    std::fprintf(
        f,
        "{\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n  \"card\": \"%s\",\n  \"command\": \"%s\",\n"
        "  \"metrics\": {\n    \"copy_bandwidth_GBps\": %.1f%s%s\n  },\n  \"ratios\": {%s\n  }\n}\n",
        utc_minute().c_str(), commit.c_str(), card_name().c_str(), command.c_str(), copy_bw / 1e9,
        metrics.empty() ? "" : ",", metrics.c_str(), ratios.c_str());
    std::fclose(f);
}

}  // namespace grimoire::bench
