// Placeholder until the inspect command lands (replaced in this session).
#include <cstdio>

#include "cli/commands.h"

namespace grimoire::cli {

Runner add_inspect_command(CLI::App& app) {
    app.add_subcommand("inspect", "inspect (not available yet)");
    return [] {
        std::fprintf(stderr, "error: 'inspect' is not available in this build\n");
        return 1;
    };
}

}  // namespace grimoire::cli
