#include "cli/default_model.h"

#include <filesystem>
#include <vector>

#include "core/error.h"

namespace grimoire::cli {

std::string default_model_dir() {
    namespace fs = std::filesystem;
    std::vector<fs::path> candidates;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const fs::path bin = exe.parent_path();
        for (const char* rel : {"models/demo", "../models/demo", "../../models/demo", "../share/grimoire/models/demo"})
            candidates.push_back(bin / rel);
    }
    candidates.push_back(fs::path(GRIMOIRE_SOURCE_DIR) / "models/demo");
    std::string searched;
    for (const auto& c : candidates) {
        if (fs::exists(c / "config.json", ec)) return fs::weakly_canonical(c, ec).string();
        searched += "\n  " + c.lexically_normal().string();
    }
    throw Error("no --model given and the bundled demo model was not found; searched:" + searched);
}

}  // namespace grimoire::cli
