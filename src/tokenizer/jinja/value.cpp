#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/pystr.h"

namespace grimoire::jinja {

void fail(const std::string& msg) { throw Error(msg); }

Value Value::undefined(std::string name) {
    Value v;
    v.s = std::move(name);
    return v;
}
Value Value::none() {
    Value v;
    v.kind = Kind::None;
    return v;
}
Value Value::boolean(bool x) {
    Value v;
    v.kind = Kind::Bool;
    v.b = x;
    v.i = x ? 1 : 0;
    v.f = static_cast<double>(v.i);
    return v;
}
Value Value::integer(int64_t x) {
    Value v;
    v.kind = Kind::Int;
    v.i = x;
    v.f = static_cast<double>(x);
    return v;
}
Value Value::number(double x) {
    Value v;
    v.kind = Kind::Float;
    v.f = x;
    return v;
}
Value Value::string(std::string x) {
    Value v;
    v.kind = Kind::String;
    v.s = std::move(x);
    return v;
}
Value Value::make_list(List x) {
    Value v;
    v.kind = Kind::List;
    v.list = std::make_shared<const List>(std::move(x));
    return v;
}
Value Value::make_tuple(List x) {
    Value v;
    v.kind = Kind::Tuple;
    v.list = std::make_shared<const List>(std::move(x));
    return v;
}
Value Value::make_dict(Dict x) {
    Value v;
    v.kind = Kind::Dict;
    v.dict = std::make_shared<Dict>(std::move(x));
    return v;
}
Value Value::make_namespace(Dict x) {
    Value v;
    v.kind = Kind::Namespace;
    v.dict = std::make_shared<Dict>(std::move(x));
    return v;
}
Value Value::function(std::string name, NativeFn f) {
    Value v;
    v.kind = Kind::Callable;
    v.fn = std::make_shared<const Callable>(Callable{std::move(name), std::move(f)});
    return v;
}

bool Value::truthy() const {
    switch (kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b;
    case Kind::Int: return i != 0;
    case Kind::Float: return f != 0.0;
    case Kind::String: return !s.empty();
    case Kind::List:
    case Kind::Tuple: return !list->empty();
    case Kind::Dict: return !dict->empty();
    case Kind::Namespace:
    case Kind::Callable: return true;
    }
    return false;
}

const Value* Value::find(const std::string& key) const {
    if (!dict) return nullptr;
    for (const auto& [k, v] : *dict)
        if (k.kind == Kind::String && k.s == key) return &v;
    return nullptr;
}

const Value* CallArgs::get(size_t index, const char* name) const {
    for (const auto& [k, v] : kw)
        if (k == name) return &v;
    if (index < pos.size()) return &pos[index];
    return nullptr;
}

void CallArgs::check(size_t max_pos, std::initializer_list<const char*> names) const {
    if (pos.size() > max_pos) fail(callee + "() takes at most " + std::to_string(max_pos) + " positional arguments");
    for (const auto& [k, v] : kw) {
        bool ok = false;
        size_t idx = 0;
        for (const char* n : names) {
            if (k == n) {
                ok = true;
                if (idx < pos.size()) fail(callee + "() got multiple values for argument '" + k + "'");
            }
            ++idx;
        }
        if (!ok) fail(callee + "() got an unexpected keyword argument '" + k + "'");
    }
}

const char* type_name(const Value& v) {
    switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Callable: return "function";
    }
    return "object";
}

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
    // Shortest round-trip digits, then Python's layout: exponent form when exp < -4 or exp >= 16.
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    bool neg = sci[0] == '-';
    if (neg) sci.erase(0, 1);
    size_t epos = sci.find('e');
    std::string mant = sci.substr(0, epos);
    int exp = std::stoi(sci.substr(epos + 1));
    std::string digits;
    for (char c : mant)
        if (c != '.') digits += c;
    std::string out = neg ? "-" : "";
    if (exp < -4 || exp >= 16) {
        out += digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char eb[16];
        std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
        return out + eb;
    }
    if (exp < 0) return out + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
    return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

static std::string str_repr(const std::string& s) {
    bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
    char q = (has_single && !has_double) ? '"' : '\'';
    std::string out(1, q);
    for (char32_t c : pystr::decode(s)) {
        if (c == static_cast<char32_t>(q) || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (!pystr::is_printable(c)) {
            char b[16];
            if (c < 0x100)
                std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(c));
            else if (c < 0x10000)
                std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
            else
                std::snprintf(b, sizeof b, "\\U%08x", static_cast<unsigned>(c));
            out += b;
        } else {
            pystr::append_utf8(out, c);
        }
    }
    out += q;
    return out;
}

std::string to_repr(const Value& v) {
    switch (v.kind) {
    case Kind::String: return str_repr(v.s);
    case Kind::List:
    case Kind::Tuple: {
        bool tuple = v.kind == Kind::Tuple;
        std::string out = tuple ? "(" : "[";
        for (size_t k = 0; k < v.list->size(); ++k) {
            if (k) out += ", ";
            out += to_repr((*v.list)[k]);
        }
        if (tuple && v.list->size() == 1) out += ",";
        return out + (tuple ? ")" : "]");
    }
    case Kind::Dict: {
        std::string out = "{";
        bool first = true;
        for (const auto& [k, x] : *v.dict) {
            if (!first) out += ", ";
            first = false;
            out += to_repr(k) + ": " + to_repr(x);
        }
        return out + "}";
    }
    case Kind::Undefined: return "Undefined";
    default: return to_str(v);
    }
}

std::string to_str(const Value& v) {
    switch (v.kind) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return v.b ? "True" : "False";
    case Kind::Int: return std::to_string(v.i);
    case Kind::Float: return float_repr(v.f);
    case Kind::String: return v.s;
    case Kind::List:
    case Kind::Tuple:
    case Kind::Dict: return to_repr(v);
    case Kind::Namespace: {
        Value d;
        d.kind = Kind::Dict;
        d.dict = v.dict;
        return "<Namespace " + to_repr(d) + ">";
    }
    case Kind::Callable: return "<function " + v.fn->name + ">";
    }
    return "";
}

bool equals(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind == Kind::Float || b.kind == Kind::Float) return a.f == b.f;
        return a.i == b.i;
    }
    if (a.kind == Kind::Tuple || b.kind == Kind::Tuple || a.kind == Kind::List || b.kind == Kind::List) {
        if (a.kind != b.kind || a.list->size() != b.list->size()) return false;
        for (size_t k = 0; k < a.list->size(); ++k)
            if (!equals((*a.list)[k], (*b.list)[k])) return false;
        return true;
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.s == b.s;
    case Kind::Dict: {
        if (a.dict->size() != b.dict->size()) return false;
        for (const auto& [k, x] : *a.dict) {
            bool found = false;
            for (const auto& [k2, y] : *b.dict)
                if (equals(k, k2)) {
                    if (!equals(x, y)) return false;
                    found = true;
                    break;
                }
            if (!found) return false;
        }
        return true;
    }
    default: return a.dict == b.dict && a.fn == b.fn;  // identity for namespaces and callables
    }
}

int compare(const Value& a, const Value& b) {
    if (a.is_undefined() || b.is_undefined()) fail("'" + (a.is_undefined() ? a.s : b.s) + "' is undefined");
    if (a.is_number() && b.is_number()) {
        if (a.kind == Kind::Float || b.kind == Kind::Float) return a.f < b.f ? -1 : (a.f > b.f ? 1 : 0);
        return a.i < b.i ? -1 : (a.i > b.i ? 1 : 0);
    }
    if (a.kind == Kind::String && b.kind == Kind::String) return a.s < b.s ? -1 : (a.s > b.s ? 1 : 0);
    if ((a.kind == Kind::List && b.kind == Kind::List) || (a.kind == Kind::Tuple && b.kind == Kind::Tuple)) {
        size_t n = std::min(a.list->size(), b.list->size());
        for (size_t k = 0; k < n; ++k) {
            if (equals((*a.list)[k], (*b.list)[k])) continue;
            return compare((*a.list)[k], (*b.list)[k]);
        }
        return a.list->size() < b.list->size() ? -1 : (a.list->size() > b.list->size() ? 1 : 0);
    }
    fail(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" + type_name(b) + "'");
}

Value from_json(const nlohmann::ordered_json& j) {
    switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
        auto u = j.get<uint64_t>();
        if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
        return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
        List l;
        l.reserve(j.size());
        for (const auto& x : j) l.push_back(from_json(x));
        return Value::make_list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
        Dict d;
        d.reserve(j.size());
        for (auto it = j.begin(); it != j.end(); ++it) d.emplace_back(Value::string(it.key()), from_json(it.value()));
        return Value::make_dict(std::move(d));
    }
    default: fail("unsupported JSON value in template context");
    }
}

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
    out += '"';
    auto esc_cp = [&](char32_t c) {
        char b[16];
        std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
        out += b;
    };
    for (char32_t c : pystr::decode(s)) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
            if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
                if (c >= 0x10000) {  // ensure_ascii writes astral points as a surrogate pair
                    char32_t v = c - 0x10000;
                    esc_cp(0xD800 + (v >> 10));
                    esc_cp(0xDC00 + (v & 0x3FF));
                } else {
                    esc_cp(c);
                }
            } else {
                pystr::append_utf8(out, c);
            }
        }
    }
    out += '"';
}

static std::string json_float(double d) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
    return float_repr(d);
}

static void dump(std::string& out, const Value& v, const DumpOptions& o, int depth) {
    if (depth > 512) fail("tojson: nesting too deep");
    auto newline = [&](int d) {
        out += '\n';
        for (int k = 0; k < d; ++k) out += o.indent;
    };
    switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.b ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.i); return;
    case Kind::Float: out += json_float(v.f); return;
    case Kind::String: json_string(out, v.s, o.ensure_ascii); return;
    case Kind::List:
    case Kind::Tuple: {
        if (v.list->empty()) {
            out += "[]";
            return;
        }
        out += '[';
        for (size_t k = 0; k < v.list->size(); ++k) {
            if (k) out += o.item_sep;
            if (o.has_indent) newline(depth + 1);
            dump(out, (*v.list)[k], o, depth + 1);
        }
        if (o.has_indent) newline(depth);
        out += ']';
        return;
    }
    case Kind::Dict: {
        if (v.dict->empty()) {
            out += "{}";
            return;
        }
        std::vector<std::pair<std::string, const Value*>> items;
        for (const auto& [k, x] : *v.dict) {
            std::string key;
            switch (k.kind) {
            case Kind::String: key = k.s; break;
            case Kind::None: key = "null"; break;
            case Kind::Bool: key = k.b ? "true" : "false"; break;
            case Kind::Int: key = std::to_string(k.i); break;
            case Kind::Float: key = json_float(k.f); break;
            default: fail(std::string("keys must be str, int, float, bool or None, not ") + type_name(k));
            }
            items.emplace_back(std::move(key), &x);
        }
        if (o.sort_keys)
            std::stable_sort(items.begin(), items.end(), [](auto& a, auto& b) { return a.first < b.first; });
        out += '{';
        for (size_t k = 0; k < items.size(); ++k) {
            if (k) out += o.item_sep;
            if (o.has_indent) newline(depth + 1);
            json_string(out, items[k].first, o.ensure_ascii);
            out += o.key_sep;
            dump(out, *items[k].second, o, depth + 1);
        }
        if (o.has_indent) newline(depth);
        out += '}';
        return;
    }
    default: fail(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
    }
}

std::string to_json(const Value& v, const DumpOptions& opt) {
    std::string out;
    dump(out, v, opt, 0);
    return out;
}

}  // namespace grimoire::jinja
