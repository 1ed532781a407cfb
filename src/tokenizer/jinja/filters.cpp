// jinja2's built-in filters and tests (the subset chat templates use), plus transformers' tojson.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include <utf8proc.h>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/pystr.h"

namespace grimoire::jinja {

namespace {

const std::set<std::string>& filter_names() {
    static const std::set<std::string> names = {
        "abs",   "attr",   "batch",  "capitalize", "count",  "d",         "default", "dictsort",   "e",
        "escape", "first", "float",  "format",     "indent", "int",       "items",   "join",       "last",
        "length", "list",  "lower",  "map",        "max",    "min",       "reject",  "rejectattr", "replace",
        "reverse", "round", "safe",  "select",     "selectattr", "sort",  "string",  "sum",        "title",
        "tojson", "trim",  "unique", "upper",      "wordcount"};
    return names;
}

const std::set<std::string>& test_names() {
    static const std::set<std::string> names = {
        "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter",
        "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt",
        "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined",
        "upper", "==", "!=", "<", "<=", ">", ">="};
    return names;
}

bool arg_bool(const CallArgs& a, size_t i, const char* name, bool def) {
    const Value* v = a.get(i, name);
    return v ? v->truthy() : def;
}

const Value* arg(const CallArgs& a, size_t i, const char* name) { return a.get(i, name); }

Value lower_if_str(Value v, bool case_sensitive) {
    if (!case_sensitive && v.is_string()) v.s = pystr::lower(v.s);
    return v;
}

// jinja2's make_attrgetter: "a.b.0" walks items (then attributes) part by part.
Value attr_path(const Value& item, const Value& attribute) {
    if (attribute.kind == Kind::Int) return get_item(item, attribute);
    std::string path = to_str(attribute);
    Value cur = item;
    size_t start = 0;
    while (true) {
        size_t dot = path.find('.', start);
        std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
        cur = get_item(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
        if (dot == std::string::npos) return cur;
        start = dot + 1;
    }
}

List sorted_by(List items, bool reverse, const std::function<Value(const Value&)>& key) {
    std::vector<std::pair<Value, size_t>> keyed;
    for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(key(items[i]), i);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
    });
    List out;
    for (const auto& [k, i] : keyed) out.push_back(items[i]);
    return out;
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
        }
    }
    return out;
}

// Python's int(str): optional sign, digits with single underscores, surrounding whitespace.
std::optional<int64_t> parse_int(const std::string& text, int base) {
    std::string s = pystr::strip(text, std::nullopt, true, true);
    std::string clean;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isalnum(static_cast<unsigned char>(s[i - 1])) &&
            std::isalnum(static_cast<unsigned char>(s[i + 1])))
            continue;
        clean += s[i];
    }
    if (clean.empty()) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(clean.c_str(), &end, base);
    if (errno || *end || std::isspace(static_cast<unsigned char>(clean[0]))) return std::nullopt;
    return v;
}

std::optional<double> parse_float(const std::string& text) {
    std::string s = pystr::strip(text, std::nullopt, true, true);
    if (s.empty()) return std::nullopt;
    std::string low = pystr::lower(s);
    std::string body = (low[0] == '+' || low[0] == '-') ? low.substr(1) : low;
    double sign = low[0] == '-' ? -1.0 : 1.0;
    if (body == "inf" || body == "infinity") return sign * INFINITY;
    if (body == "nan") return NAN;
    if (body.find_first_not_of("0123456789._e+-") != std::string::npos) return std::nullopt;
    std::string clean;
    std::erase_if(s, [](char c) { return c == '_'; });
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (*end || end == s.c_str()) return std::nullopt;
    return v;
}

Value py_round(const Value& v, int64_t precision, const std::string& method) {
    if (method != "common" && method != "ceil" && method != "floor")
        fail("method must be common, ceil or floor");
    if (!v.is_number()) fail(std::string("type ") + type_name(v) + " doesn't define __round__ method");
    if (method == "common") {
        if (v.kind != Kind::Float) return Value::integer(v.i);  // round(int, n) stays an int for n >= 0
        if (!std::isfinite(v.f)) return v;
        // printf rounds the exact binary value half-to-even like CPython's round(x, n)
        if (precision > 300 || precision < -300) return v;
        char buf[512];
        if (precision >= 0) {
            std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), v.f);
            return Value::number(std::strtod(buf, nullptr));
        }
        double p = std::pow(10.0, static_cast<double>(-precision));
        double y = v.f / p;
        double r = std::nearbyint(y);
        return Value::number(r * p);
    }
    double p = std::pow(10.0, static_cast<double>(precision));
    double x = v.f * p;
    return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

// jinja2's title filter: capitalise each word, words split on spaces and opening brackets / dashes.
std::string jinja_title(const std::string& s) {
    auto u = pystr::decode(s);
    std::string out;
    bool word_start = true;
    for (char32_t c : u) {
        bool sep = pystr::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        std::string one;
        pystr::append_utf8(one, c);
        if (sep) out += one;
        else out += word_start ? pystr::upper(one) : pystr::lower(one);
        word_start = sep;
    }
    return out;
}

std::string indent(const std::string& text, const Value* width, bool first, bool blank) {
    std::string ind = "    ";
    if (width) ind = width->is_string() ? width->s : std::string(static_cast<size_t>(std::max<int64_t>(0, width->i)), ' ');
    auto lines = pystr::splitlines(text + "\n", false);
    std::string rv;
    if (blank) {
        for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
    } else {
        rv = lines.empty() ? "" : lines[0];
        for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
    }
    return first ? ind + rv : rv;
}

int64_t py_len(const Value& v) {
    switch (v.kind) {
    case Kind::Undefined: return 0;
    case Kind::String: return static_cast<int64_t>(pystr::length(v.s));
    case Kind::List:
    case Kind::Tuple: return static_cast<int64_t>(v.list->size());
    case Kind::Dict: return static_cast<int64_t>(v.dict->size());
    default: fail(std::string("object of type '") + type_name(v) + "' has no len()");
    }
}

Value select_like(const Value& v, CallArgs& a, bool select, bool by_attr) {
    List out;
    if (!v.truthy()) return Value::make_list({});
    size_t off = by_attr ? 1 : 0;
    if (by_attr && a.pos.empty()) fail("missing parameter for attribute name");
    std::optional<std::string> test;
    if (a.pos.size() > off) {
        if (!a.pos[off].is_string()) fail("test name must be a string");
        test = a.pos[off].s;
        if (!has_test(*test)) fail("no test named '" + *test + "'");
    }
    CallArgs targs;
    targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(std::min(a.pos.size(), off + 1)), a.pos.end());
    targs.kw = a.kw;
    for (const auto& item : iterate(v)) {
        Value x = by_attr ? attr_path(item, a.pos[0]) : item;
        CallArgs t = targs;
        bool r = test ? apply_test(*test, x, t) : x.truthy();
        if (r == select) out.push_back(item);
    }
    return Value::make_list(std::move(out));
}

Value tojson(const Value& v, CallArgs& a) {
    a.check(4, {"ensure_ascii", "indent", "separators", "sort_keys"});
    DumpOptions o;
    o.ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
    const Value* ind = arg(a, 1, "indent");
    if (ind && !ind->is_none()) {
        o.has_indent = true;
        if (ind->is_string()) o.indent = ind->s;
        else if (ind->kind == Kind::Int) o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, ind->i)), ' ');
        else fail("tojson: indent must be an int or a string");
        o.item_sep = ",";
    }
    const Value* sep = arg(a, 2, "separators");
    if (sep && !sep->is_none()) {
        List parts = iterate(*sep);
        if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string())
            fail("tojson: separators must be a pair of strings");
        o.item_sep = parts[0].s;
        o.key_sep = parts[1].s;
    }
    o.sort_keys = arg_bool(a, 3, "sort_keys", false);
    return Value::string(to_json(v, o));
}

int64_t word_count(const std::string& s) {
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : pystr::decode(s)) {
        auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
        bool w = c == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                 (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) || cat == UTF8PROC_CATEGORY_MN ||
                 cat == UTF8PROC_CATEGORY_MC;
        if (w && !in_word) ++n;
        in_word = w;
    }
    return n;
}

}  // namespace

bool has_filter(const std::string& name) { return filter_names().count(name) > 0; }
bool has_test(const std::string& name) { return test_names().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& v, CallArgs& a) {
    a.callee = name;
    if (name == "tojson") return tojson(v, a);
    if (name == "length" || name == "count") return Value::integer(py_len(v));
    if (name == "string") return Value::string(to_str(v));
    if (name == "safe") return Value::string(to_str(v));
    if (name == "trim") {
        const Value* chars = arg(a, 0, "chars");
        std::optional<std::string> c;
        if (chars && !chars->is_none()) c = to_str(*chars);
        return Value::string(pystr::strip(to_str(v), c, true, true));
    }
    if (name == "upper") return Value::string(pystr::upper(to_str(v)));
    if (name == "lower") return Value::string(pystr::lower(to_str(v)));
    if (name == "capitalize") return Value::string(pystr::capitalize(to_str(v)));
    if (name == "title") return Value::string(jinja_title(to_str(v)));
    if (name == "e" || name == "escape") return Value::string(html_escape(to_str(v)));
    if (name == "wordcount") return Value::integer(word_count(to_str(v)));
    if (name == "default" || name == "d") {
        const Value* def = arg(a, 0, "default_value");
        if (v.is_undefined() || (arg_bool(a, 1, "boolean", false) && !v.truthy()))
            return def ? *def : Value::string("");
        return v;
    }
    if (name == "items") {
        if (v.is_undefined()) return Value::make_list({});
        if (v.kind != Kind::Dict) fail("Can only get item pairs from a mapping.");
        List out;
        for (const auto& [k, x] : *v.dict) out.push_back(Value::make_tuple({k, x}));
        return Value::make_list(std::move(out));
    }
    if (name == "list") return Value::make_list(iterate(v));
    if (name == "first" || name == "last") {
        List items = iterate(v);
        if (items.empty()) return Value::undefined("first");
        return name == "first" ? items.front() : items.back();
    }
    if (name == "join") {
        const Value* d = arg(a, 0, "d");
        const Value* attribute = arg(a, 1, "attribute");
        std::string sep = d ? to_str(*d) : "";
        std::string out;
        bool first = true;
        for (const auto& item : iterate(v)) {
            if (!first) out += sep;
            first = false;
            out += to_str(attribute && !attribute->is_none() ? attr_path(item, *attribute) : item);
        }
        return Value::string(out);
    }
    if (name == "replace") {
        const Value* old = arg(a, 0, "old");
        const Value* repl = arg(a, 1, "new");
        const Value* count = arg(a, 2, "count");
        if (!old || !repl) fail("replace() missing arguments");
        return Value::string(pystr::replace(to_str(v), to_str(*old), to_str(*repl), count && !count->is_none() ? count->i : -1));
    }
    if (name == "int") {
        const Value* def = arg(a, 0, "default");
        Value fallback = def ? *def : Value::integer(0);
        int base = static_cast<int>(arg(a, 1, "base") ? arg(a, 1, "base")->i : 10);
        if (v.kind == Kind::Int || v.kind == Kind::Bool) return Value::integer(v.i);
        if (v.kind == Kind::Float) return std::isfinite(v.f) ? Value::integer(static_cast<int64_t>(v.f)) : fallback;
        if (v.is_string()) {
            if (auto i = parse_int(v.s, base)) return Value::integer(*i);
            if (auto f = parse_float(v.s); f && std::isfinite(*f)) return Value::integer(static_cast<int64_t>(*f));
        }
        return fallback;
    }
    if (name == "float") {
        const Value* def = arg(a, 0, "default");
        if (v.is_number()) return Value::number(v.f);
        if (v.is_string())
            if (auto f = parse_float(v.s)) return Value::number(*f);
        return def ? *def : Value::number(0.0);
    }
    if (name == "abs") {
        if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
        if (v.is_number()) return Value::integer(v.i < 0 ? -v.i : v.i);
        fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
    }
    if (name == "round") {
        const Value* p = arg(a, 0, "precision");
        const Value* m = arg(a, 1, "method");
        return py_round(v, p ? p->i : 0, m ? to_str(*m) : "common");
    }
    if (name == "indent") {
        const Value* width = arg(a, 0, "width");
        return Value::string(indent(to_str(v), width, arg_bool(a, 1, "first", false), arg_bool(a, 2, "blank", false)));
    }
    if (name == "reverse") {
        if (v.is_string()) {
            auto u = pystr::decode(v.s);
            std::reverse(u.begin(), u.end());
            return Value::string(pystr::encode(u));
        }
        List items = iterate(v);
        std::reverse(items.begin(), items.end());
        return Value::make_list(std::move(items));
    }
    if (name == "sort" || name == "unique" || name == "min" || name == "max") {
        bool reverse = name == "sort" && arg_bool(a, 0, "reverse", false);
        size_t off = name == "sort" ? 1 : 0;
        bool cs = arg_bool(a, off, "case_sensitive", false);
        const Value* attribute = arg(a, off + 1, "attribute");
        auto key = [&](const Value& item) {
            return lower_if_str(attribute && !attribute->is_none() ? attr_path(item, *attribute) : item, cs);
        };
        List items = iterate(v);
        if (name == "sort") return Value::make_list(sorted_by(std::move(items), reverse, key));
        if (name == "unique") {
            List out, seen;
            for (const auto& item : items) {
                Value k = key(item);
                if (k.kind == Kind::List || k.kind == Kind::Dict) fail(std::string("unhashable type: '") + type_name(k) + "'");
                if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
                    seen.push_back(k);
                    out.push_back(item);
                }
            }
            return Value::make_list(std::move(out));
        }
        if (items.empty()) return Value::undefined(name);
        size_t best = 0;
        for (size_t i = 1; i < items.size(); ++i) {
            int c = compare(key(items[i]), key(items[best]));
            if (name == "min" ? c < 0 : c > 0) best = i;
        }
        return items[best];
    }
    if (name == "dictsort") {
        if (v.kind != Kind::Dict) fail("dictsort: value is not a mapping");
        bool cs = arg_bool(a, 0, "case_sensitive", false);
        const Value* by = arg(a, 1, "by");
        std::string by_s = by ? to_str(*by) : "key";
        if (by_s != "key" && by_s != "value") fail("You can only sort by either 'key' or 'value'");
        size_t pos = by_s == "key" ? 0 : 1;
        List items;
        for (const auto& [k, x] : *v.dict) items.push_back(Value::make_tuple({k, x}));
        return Value::make_list(sorted_by(std::move(items), arg_bool(a, 2, "reverse", false),
                                          [&](const Value& item) { return lower_if_str((*item.list)[pos], cs); }));
    }
    if (name == "map") {
        List out;
        if (!v.truthy()) return Value::make_list({});
        if (a.pos.empty()) {
            const Value* attribute = nullptr;
            const Value* def = nullptr;
            for (const auto& [k, x] : a.kw) {
                if (k == "attribute") attribute = &x;
                else if (k == "default") def = &x;
                else fail("Unexpected keyword argument '" + k + "'");
            }
            if (!attribute) fail("map requires a filter argument");
            for (const auto& item : iterate(v)) {
                Value r = attr_path(item, *attribute);
                if (def && !def->is_none() && r.is_undefined()) r = *def;
                out.push_back(r);
            }
        } else {
            if (!a.pos[0].is_string() || !has_filter(a.pos[0].s)) fail("map: no filter named '" + to_str(a.pos[0]) + "'");
            CallArgs fa;
            fa.pos.assign(a.pos.begin() + 1, a.pos.end());
            fa.kw = a.kw;
            for (const auto& item : iterate(v)) {
                CallArgs t = fa;
                out.push_back(apply_filter(a.pos[0].s, item, t));
            }
        }
        return Value::make_list(std::move(out));
    }
    if (name == "select" || name == "reject") return select_like(v, a, name == "select", false);
    if (name == "selectattr" || name == "rejectattr") return select_like(v, a, name == "selectattr", true);
    if (name == "attr") {
        const Value* n = arg(a, 0, "name");
        if (!n) fail("attr() missing name");
        // attr() looks up attributes only, never items: on a dict that leaves just its methods.
        if (v.kind == Kind::Dict) {
            Value m = get_attr(Value::make_dict({}), to_str(*n));
            return m.is_undefined() ? m : get_attr(v, to_str(*n));
        }
        return get_attr(v, to_str(*n));
    }
    if (name == "sum") {
        const Value* attribute = arg(a, 0, "attribute");
        const Value* start = arg(a, 1, "start");
        Value acc = start ? *start : Value::integer(0);
        for (const auto& item : iterate(v))
            acc = binary_op("+", acc, attribute && !attribute->is_none() ? attr_path(item, *attribute) : item);
        return acc;
    }
    if (name == "batch") {
        const Value* n = arg(a, 0, "linecount");
        const Value* fill = arg(a, 1, "fill_with");
        if (!n || n->kind != Kind::Int || n->i <= 0) fail("batch: linecount must be a positive integer");
        List out, cur;
        for (const auto& item : iterate(v)) {
            cur.push_back(item);
            if (static_cast<int64_t>(cur.size()) == n->i) {
                out.push_back(Value::make_list(std::move(cur)));
                cur.clear();
            }
        }
        if (!cur.empty()) {
            if (fill && !fill->is_none())
                while (static_cast<int64_t>(cur.size()) < n->i) cur.push_back(*fill);
            out.push_back(Value::make_list(std::move(cur)));
        }
        return Value::make_list(std::move(out));
    }
    if (name == "format") {
        Value args;
        if (!a.kw.empty()) fail("format: keyword arguments are not supported");
        return binary_op("%", Value::string(to_str(v)), Value::make_tuple(a.pos));
    }
    fail("no filter named '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
    a.callee = name;
    auto other = [&]() -> const Value& {
        if (a.pos.empty()) fail(name + "() missing 1 required positional argument");
        return a.pos[0];
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.kind == Kind::Bool;
    if (name == "false") return v.kind == Kind::Bool && !v.b;
    if (name == "true") return v.kind == Kind::Bool && v.b;
    if (name == "integer") return v.kind == Kind::Int;
    if (name == "float") return v.kind == Kind::Float;
    if (name == "number") return v.is_number();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.kind == Kind::Dict;
    if (name == "iterable" || name == "sequence")
        return v.is_undefined() || v.is_string() || v.is_sequence() || v.kind == Kind::Dict;
    if (name == "callable") return v.kind == Kind::Callable;
    if (name == "escaped") return false;
    if (name == "lower" || name == "upper") {
        std::string s = to_str(v);
        std::string lo = pystr::lower(s), up = pystr::upper(s);
        if (lo == up) return false;
        return name == "lower" ? s == lo : s == up;
    }
    if (name == "odd" || name == "even" || name == "divisibleby") {
        Value d = name == "divisibleby" ? other() : Value::integer(2);
        Value m = binary_op("%", v, d);
        if (name == "odd") return equals(m, Value::integer(1));
        return equals(m, Value::integer(0));
    }
    if (name == "eq" || name == "equalto" || name == "==") return equals(v, other());
    if (name == "ne" || name == "!=") return !equals(v, other());
    if (name == "lt" || name == "lessthan" || name == "<") return compare(v, other()) < 0;
    if (name == "le" || name == "<=") return compare(v, other()) <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, other()) > 0;
    if (name == "ge" || name == ">=") return compare(v, other()) >= 0;
    if (name == "in") return contains(other(), v);
    if (name == "sameas") {
        const Value& o = other();
        if (v.kind != o.kind) return false;
        switch (v.kind) {
        case Kind::None:
        case Kind::Undefined: return v.kind == Kind::None;
        case Kind::Bool: return v.b == o.b;
        case Kind::Int: return v.i == o.i && v.i >= -5 && v.i <= 256;  // CPython's small-int cache
        case Kind::List:
        case Kind::Tuple: return v.list == o.list;
        case Kind::Dict:
        case Kind::Namespace: return v.dict == o.dict;
        case Kind::Callable: return v.fn == o.fn;
        default: return false;
        }
    }
    if (name == "filter") return v.is_string() && has_filter(v.s);
    if (name == "test") return v.is_string() && has_test(v.s);
    fail("no test named '" + name + "'");
}

}  // namespace grimoire::jinja
