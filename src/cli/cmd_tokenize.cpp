// `grimoire tokenize --model DIR`: reads UTF-8 text from stdin and prints its token ids, space separated, on one
// line; no BOS is added and special tokens written in the text are recognised. DIR needs only the tokenizer
// files (tokenizer.json or vocab.json + merges.txt, and tokenizer_config.json).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace grimoire::cli {

namespace {

std::string read_stdin() {
    std::string text;
    char buf[1 << 16];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, stdin)) > 0;) text.append(buf, n);
    if (std::ferror(stdin)) throw Error("tokenize: cannot read stdin");
    return text;
}

int tokenize(const std::string& dir) {
    const auto tok = Tokenizer::load(dir);
    const auto ids = tok->encode(read_stdin());
    std::string line;
    line.reserve(ids.size() * 7);
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) line.push_back(' ');
        line += std::to_string(ids[i]);
    }
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

Runner add_tokenize_command(CLI::App& app) {
    auto dir = std::make_shared<std::string>();
    CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of stdin (UTF-8), space separated, no BOS");
    sub->add_option("--model", *dir, "Directory with tokenizer.json (or vocab.json + merges.txt)")->required();
    return [dir] { return tokenize(*dir); };
}

}  // namespace grimoire::cli
