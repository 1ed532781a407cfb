// Jinja parser: tokens -> syntax tree, following jinja2's grammar and operator precedence. Everything a
// template uses that the interpreter cannot run (extends, include, import, unknown filters/tests, unknown
// tags) is rejected here, so a template either loads and renders like jinja2 or fails at load time.
#pragma once
#include <memory>
#include <string>

#include "tokenizer/jinja/ast.h"

namespace grimoire::jinja {

// Throws Error("template:LINE:COL: ...").
std::unique_ptr<Template> parse(const std::string& source);

// Names the interpreter implements (the parser checks filter and test names against these).
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

}  // namespace grimoire::jinja
