// Placeholder until the tokenize command lands (replaced in this session).
#include <cstdio>

#include "cli/commands.h"

namespace grimoire::cli {

Runner add_tokenize_command(CLI::App& app) {
    app.add_subcommand("tokenize", "tokenize (not available yet)");
    return [] {
        std::fprintf(stderr, "error: 'tokenize' is not available in this build\n");
        return 1;
    };
}

}  // namespace grimoire::cli
