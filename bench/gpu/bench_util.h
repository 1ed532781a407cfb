// What the .cpp GPU benchmarks share: bench_timing.h (checks, event timing, the copy bandwidth they report
// ratios against) and the bench/results record {"date", "commit", "card", "command", "metrics", "ratios"}
// (printed and saved), built with nlohmann-json.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_timing.h"
#include "core/error.h"

namespace grimoire::bench {

inline void write_record(const nlohmann::json& metrics, const nlohmann::json& ratios, const std::string& commit,
                         const std::string& command, const std::string& out_path) {
    const nlohmann::json res = {{"date", utc_minute()}, {"commit", commit},   {"card", card_name()},
                                {"command", command},   {"metrics", metrics}, {"ratios", ratios}};
    const std::string s = res.dump(2);
    std::printf("%s\n", s.c_str());
    if (!out_path.empty()) std::ofstream(out_path) << s << "\n";
}

}  // namespace grimoire::bench
