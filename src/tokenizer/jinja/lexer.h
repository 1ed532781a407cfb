// Jinja lexer with jinja2's whitespace rules as transformers configures them: trim_blocks (drop the first
// newline after a block or comment tag), lstrip_blocks (drop spaces before a block or comment tag that starts
// a line), `-` / `+` modifiers on tags, raw blocks, comments, and keep_trailing_newline=False.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace grimoire::jinja {

enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
    Tok type;
    std::string text;  // Data text, name, unescaped string value, operator
    int64_t ival = 0;
    double fval = 0.0;
    int line = 1;
    int col = 1;
};

// Throws Error("template:LINE:COL: ...") on a lexical error.
std::vector<Token> tokenize(const std::string& source);

}  // namespace grimoire::jinja
