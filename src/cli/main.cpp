// grimoire: the command-line entry point. Errors from loading (grimoire::Error) are caught here, printed to
// stderr, and turned into exit code 1.
#include <cstdio>
#include <exception>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
    CLI::App app{"grimoire: LLM inference engine with an OpenAI-compatible server"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "grimoire 0.1.0");
    std::vector<std::pair<CLI::App*, grimoire::cli::Runner>> cmds;
    auto reg = [&](grimoire::cli::Runner (*add)(CLI::App&)) {
        const size_t before = app.get_subcommands({}).size();
        grimoire::cli::Runner r = add(app);
        auto subs = app.get_subcommands({});
        if (subs.size() > before) cmds.emplace_back(subs.back(), std::move(r));
    };
    reg(grimoire::cli::add_run_command);
    reg(grimoire::cli::add_serve_command);
    reg(grimoire::cli::add_tokenize_command);
    reg(grimoire::cli::add_inspect_command);
    CLI11_PARSE(app, argc, argv);
    try {
        for (auto& [sub, run] : cmds)
            if (sub->parsed()) return run();
    } catch (const grimoire::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 1;
}
