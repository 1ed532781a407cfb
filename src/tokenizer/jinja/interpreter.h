// Tree-walking renderer with jinja2's scoping: `if` shares its scope, each for-loop iteration and each macro
// call gets a fresh child scope (so `set` inside them does not leak; namespaces exist for that), and macros
// see the scope they were defined in as it is at call time.
#pragma once
#include <string>
#include <unordered_map>

#include "tokenizer/jinja/ast.h"

namespace grimoire::jinja {

// Renders `tmpl` with `vars` as the template's context (the environment globals are added underneath).
// Throws Error (with template line:column) on runtime errors and TemplateRaise for raise_exception.
std::string render(const Template& tmpl, const std::unordered_map<std::string, Value>& vars);

}  // namespace grimoire::jinja
