// What the GPU benchmarks share: the device-to-device copy bandwidth they report ratios against, event timing,
// and the bench/results record {"date", "commit", "card", "command", "metrics", "ratios"} (printed and saved).
#pragma once
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
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

inline void write_record(const nlohmann::json& metrics, const nlohmann::json& ratios, const std::string& commit,
                         const std::string& command, const std::string& out_path) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    const auto tnow = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%MZ", std::gmtime(&tnow));
    const nlohmann::json res = {{"date", date}, {"commit", commit},   {"card", prop.name},
                                {"command", command}, {"metrics", metrics}, {"ratios", ratios}};
    const std::string s = res.dump(2);
    std::printf("%s\n", s.c_str());
    if (!out_path.empty()) std::ofstream(out_path) << s << "\n";
}

}  // namespace grimoire::bench
