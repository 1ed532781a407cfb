// Placeholder until the serve command lands (replaced in this session).
#include <cstdio>

#include "cli/commands.h"

namespace grimoire::cli {

Runner add_serve_command(CLI::App& app) {
    app.add_subcommand("serve", "serve (not available yet)");
    return [] {
        std::fprintf(stderr, "error: 'serve' is not available in this build\n");
        return 1;
    };
}

}  // namespace grimoire::cli
