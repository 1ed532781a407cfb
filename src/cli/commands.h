// Each `grimoire <command>` registers its options on the CLI11 app and returns the function that runs it.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace grimoire::cli {

using Runner = std::function<int()>;

Runner add_run_command(CLI::App& app);       // cmd_run.cpp
Runner add_tokenize_command(CLI::App& app);  // cmd_tokenize.cpp
Runner add_inspect_command(CLI::App& app);   // cmd_inspect.cpp
Runner add_serve_command(CLI::App& app);     // cmd_serve.cpp

}  // namespace grimoire::cli
