// The runtime library of the interpreter: attribute / item access with jinja2's sandboxed semantics, Python's
// operators, str / dict / list methods, jinja2's filters and tests, and the globals transformers installs.
#pragma once
#include <string>
#include <unordered_map>

#include "tokenizer/jinja/value.h"

namespace grimoire::jinja {

// `obj.name`: a method for str / dict / list (s.split, d.items), else the item `name`, else Undefined.
// Raises on Undefined objects, as jinja2's Undefined does.
Value get_attr(const Value& obj, const std::string& name);
// `obj[key]`: the item, else (for a string key) the attribute, else Undefined.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` on a str / list / tuple (None or Undefined bounds take the default).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python iteration: list/tuple items, dict keys, string characters, Undefined as empty; raises otherwise.
List iterate(const Value& v);

// Python binary operators + - * / // % ** and jinja's `~` (string concatenation), `in`.
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);

// Filters and tests by jinja2 name.
Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
bool apply_test(const std::string& name, const Value& v, CallArgs& args);

// Globals of transformers' environment: range, namespace, dict, raise_exception, strftime_now.
void add_globals(std::unordered_map<std::string, Value>& vars);

// Calls a callable value (raises "not callable" otherwise).
Value call_value(const Value& f, CallArgs& args);

}  // namespace grimoire::jinja
