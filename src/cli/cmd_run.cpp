// Placeholder until the run command lands (replaced in this session).
#include <cstdio>

#include "cli/commands.h"

namespace grimoire::cli {

Runner add_run_command(CLI::App& app) {
    app.add_subcommand("run", "run (not available yet)");
    return [] {
        std::fprintf(stderr, "error: 'run' is not available in this build\n");
        return 1;
    };
}

}  // namespace grimoire::cli
