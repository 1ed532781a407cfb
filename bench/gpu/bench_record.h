// The bench/results record every GPU benchmark writes: {"date", "commit", "card", "command", "metrics", "ratios"},
// printed and, with a path, saved.
#pragma once
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace grimoire::bench {

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
