// Chat-template rendering speed: every shared template over every request in tests/templates/cases.json.
// Prints one JSON object: mean microseconds per render per template and overall, plus parse time.
//
//   bench_chat_template [REPS [TEMPLATES_DIR CASES_JSON]]   (default REPS = 20, the repository's data)
// The anchor is Python jinja2 rendering the same cases (bench/bench_chat_template.py prints its figure).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/chat_template.h"

using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

static std::string read(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

int main(int argc, char** argv) {
    int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
    std::filesystem::path root = GRIMOIRE_SOURCE_DIR;
    auto dir = argc > 3 ? std::filesystem::path(argv[2]) : root / ".." / "shared" / "data" / "templates";
    auto cases_path = argc > 3 ? std::filesystem::path(argv[3]) : root / "tests" / "templates" / "cases.json";
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().extension() == ".jinja") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    ordered_json cases = ordered_json::parse(read(cases_path));
    for (auto& c : cases) {
        c.erase("name");
        if (!c.contains("bos_token")) c["bos_token"] = "<s>";
        if (!c.contains("eos_token")) c["eos_token"] = "</s>";
    }
    ordered_json per_template = ordered_json::object();
    double total_us = 0, parse_us = 0;
    long renders = 0, out_bytes = 0;
    for (const auto& f : files) {
        std::string src = read(f);
        auto t0 = Clock::now();
        grimoire::ChatTemplate tmpl(src);
        parse_us += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        long n = 0;
        auto t1 = Clock::now();
        for (int r = 0; r < reps; ++r)
            for (const auto& c : cases) {
                try {
                    out_bytes += static_cast<long>(tmpl.render(c).size());
                } catch (const grimoire::Error&) {
                }
                ++n;
            }
        double us = std::chrono::duration<double, std::micro>(Clock::now() - t1).count();
        per_template[f.stem().string()] = us / static_cast<double>(n);
        total_us += us;
        renders += n;
    }
    ordered_json out = {{"templates", files.size()},
                        {"cases", cases.size()},
                        {"reps", reps},
                        {"mean_us_per_render", total_us / static_cast<double>(renders)},
                        {"mean_parse_us", parse_us / static_cast<double>(files.size())},
                        {"rendered_bytes_per_rep", out_bytes / reps},
                        {"per_template_us", per_template}};
    std::cout << out.dump(2) << "\n";
    return 0;
}
