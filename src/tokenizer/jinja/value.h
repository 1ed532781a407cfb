// Values of the Jinja interpreter. They mirror the Python objects jinja2 sees when transformers renders a chat
// template: JSON data (None, bool, int, float, str, list, dict with insertion order), tuples, jinja's Undefined,
// namespace() objects and callables (macros, globals, bound methods such as `s.split`). Lists and dicts are
// shared and immutable once built (the sandbox forbids mutating them); only namespaces are mutated in place.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace grimoire::jinja {

struct Value;
using List = std::vector<Value>;
// Keys keep insertion order (Python dicts do, and tojson / items() show it).
using Dict = std::vector<std::pair<Value, Value>>;

struct CallArgs;
using NativeFn = std::function<Value(CallArgs&)>;

struct Callable {
    std::string name;
    NativeFn fn;
};

enum class Kind { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Callable };

struct Value {
    Kind kind = Kind::Undefined;
    bool b = false;
    int64_t i = 0;
    double f = 0.0;
    std::string s;                      // String; for Undefined, the name that was missing (error messages)
    std::shared_ptr<const List> list;   // List, Tuple
    std::shared_ptr<Dict> dict;         // Dict (never mutated after construction), Namespace (mutable)
    std::shared_ptr<const Callable> fn;

    static Value undefined(std::string name = {});
    static Value none();
    static Value boolean(bool v);
    static Value integer(int64_t v);
    static Value number(double v);
    static Value string(std::string v);
    static Value make_list(List v);
    static Value make_tuple(List v);
    static Value make_dict(Dict v);
    static Value make_namespace(Dict v);
    static Value function(std::string name, NativeFn fn);

    bool is_undefined() const { return kind == Kind::Undefined; }
    bool is_none() const { return kind == Kind::None; }
    bool is_string() const { return kind == Kind::String; }
    bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
    bool is_sequence() const { return kind == Kind::List || kind == Kind::Tuple; }
    bool is_mapping() const { return kind == Kind::Dict; }

    // Python truthiness (Undefined is falsy).
    bool truthy() const;
    // Dict lookup by string key; nullptr when absent. Only for Dict / Namespace.
    const Value* find(const std::string& key) const;
};

// Positional and keyword arguments of a call, with Python's binding rules for native functions.
struct CallArgs {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    std::string callee;  // for error messages

    // Binds parameter `name` at position `index`: keyword first, then positional; nullptr when not given.
    const Value* get(size_t index, const char* name) const;
    // Throws when more positional arguments than `max_pos` or an unknown keyword was passed.
    void check(size_t max_pos, std::initializer_list<const char*> names) const;
};

// `raise_exception(msg)` in a template: the message is the template author's, passed on without location.
class TemplateRaise : public Error {
public:
    using Error::Error;
};

// Errors raised while rendering (TemplateError / UndefinedError / TypeError in Python all map to this).
[[noreturn]] void fail(const std::string& msg);

// Python type name for error messages ("str", "list", "dict", ...).
const char* type_name(const Value& v);

// str(v) as Python prints it ({{ v }}, `~`, |string): strings raw, None -> "None", lists/dicts as repr.
std::string to_str(const Value& v);
// repr(v): strings quoted as Python quotes them.
std::string to_repr(const Value& v);
// Python float repr (shortest round-trip, "1e-05", "1.0", "inf").
std::string float_repr(double d);

// Python ==, and the ordering used by <, sort, min/max (throws TypeError-like Error on unorderable types).
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);

// JSON <-> Value. Dict order follows the ordered_json's order.
Value from_json(const nlohmann::ordered_json& j);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as Python's json module writes it.
struct DumpOptions {
    bool ensure_ascii = false;
    bool has_indent = false;
    std::string indent;  // the indent unit when has_indent
    std::string item_sep = ", ";
    std::string key_sep = ": ";
    bool sort_keys = false;
};
std::string to_json(const Value& v, const DumpOptions& opt);

}  // namespace grimoire::jinja
