// Attribute and item access, Python operators, str / dict / list methods and the environment's globals.
#include <chrono>
#include <cmath>
#include <ctime>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"

namespace grimoire::jinja {

namespace {

// Results larger than this are refused (`'x' * 10**9` would otherwise exhaust memory).
constexpr size_t kMaxValueBytes = size_t{64} << 20;
// jinja2's sandbox caps range() at this many items.
constexpr int64_t kMaxRange = 100000;

[[noreturn]] void undefined_error(const Value& v) { fail("'" + (v.s.empty() ? "value" : v.s) + "' is undefined"); }

std::optional<std::string> opt_str(const CallArgs& a, size_t i, const char* name) {
    const Value* v = a.get(i, name);
    if (!v || v->is_none()) return std::nullopt;
    if (!v->is_string()) fail(a.callee + "() argument must be str or None, not " + type_name(*v));
    return v->s;
}

int64_t opt_int(const CallArgs& a, size_t i, const char* name, int64_t def) {
    const Value* v = a.get(i, name);
    if (!v || v->is_none()) return def;
    if (v->kind != Kind::Int && v->kind != Kind::Bool) fail(a.callee + "(): integer argument expected");
    return v->i;
}

const std::string& req_str(const CallArgs& a, size_t i, const char* name) {
    const Value* v = a.get(i, name);
    if (!v) fail(a.callee + "() missing required argument '" + name + "'");
    if (!v->is_string()) fail(a.callee + "() argument must be str, not " + type_name(*v));
    return v->s;
}

Value str_list(const std::vector<std::string>& parts) {
    List l;
    l.reserve(parts.size());
    for (const auto& p : parts) l.push_back(Value::string(p));
    return Value::make_list(std::move(l));
}

// Python's s.startswith(prefix | tuple of prefixes).
bool affix_match(const std::string& s, const Value& p, bool start, const std::string& callee) {
    auto one = [&](const Value& x) {
        if (!x.is_string()) fail(callee + "() arg must be str or a tuple of str, not " + type_name(x));
        if (x.s.size() > s.size()) return false;
        return start ? s.compare(0, x.s.size(), x.s) == 0 : s.compare(s.size() - x.s.size(), x.s.size(), x.s) == 0;
    };
    if (p.kind == Kind::Tuple) {
        for (const auto& x : *p.list)
            if (one(x)) return true;
        return false;
    }
    return one(p);
}

// "{} {name} {0}".format(...) with str() conversion only (the sandbox's format_map subset real templates use).
std::string py_format(const std::string& fmt, const CallArgs& a) {
    std::string out;
    size_t auto_idx = 0;
    for (size_t i = 0; i < fmt.size(); ++i) {
        char c = fmt[i];
        if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
            out += '{';
            ++i;
        } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
            out += '}';
            ++i;
        } else if (c == '{') {
            size_t e = fmt.find('}', i);
            if (e == std::string::npos) fail("Single '{' encountered in format string");
            std::string field = fmt.substr(i + 1, e - i - 1);
            if (field.find_first_of(":!.[") != std::string::npos) fail("format specs are not supported");
            const Value* v = nullptr;
            if (field.empty()) {
                if (auto_idx >= a.pos.size()) fail("Replacement index out of range for positional args");
                v = &a.pos[auto_idx++];
            } else if (field.find_first_not_of("0123456789") == std::string::npos) {
                size_t k = std::stoul(field);
                if (k >= a.pos.size()) fail("Replacement index out of range for positional args");
                v = &a.pos[k];
            } else {
                for (const auto& [k, x] : a.kw)
                    if (k == field) v = &x;
                if (!v) fail("KeyError: '" + field + "'");
            }
            out += to_str(*v);
            i = e;
        } else if (c == '}') {
            fail("Single '}' encountered in format string");
        } else {
            out += c;
        }
    }
    return out;
}

Value string_method(const Value& obj, const std::string& name) {
    const std::string s = obj.s;
    auto method = [&](auto fn) { return Value::function("str." + name, fn); };
    if (name == "startswith" || name == "endswith") {
        bool start = name == "startswith";
        return method([s, start](CallArgs& a) {
            a.check(1, {});
            if (a.pos.empty()) fail("startswith() takes at least 1 argument");
            return Value::boolean(affix_match(s, a.pos[0], start, a.callee));
        });
    }
    if (name == "split" || name == "rsplit") {
        bool rev = name == "rsplit";
        return method([s, rev](CallArgs& a) {
            a.check(2, {"sep", "maxsplit"});
            auto sep = opt_str(a, 0, "sep");
            if (sep && sep->empty()) fail("empty separator");
            int64_t maxsplit = opt_int(a, 1, "maxsplit", -1);
            return str_list(rev ? pystr::rsplit(s, sep, maxsplit) : pystr::split(s, sep, maxsplit));
        });
    }
    if (name == "splitlines")
        return method([s](CallArgs& a) {
            a.check(1, {"keepends"});
            const Value* k = a.get(0, "keepends");
            return str_list(pystr::splitlines(s, k && k->truthy()));
        });
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        bool l = name != "rstrip", r = name != "lstrip";
        return method([s, l, r](CallArgs& a) {
            a.check(1, {});
            return Value::string(pystr::strip(s, opt_str(a, 0, "chars"), l, r));
        });
    }
    if (name == "replace")
        return method([s](CallArgs& a) {
            a.check(3, {"count"});
            return Value::string(pystr::replace(s, req_str(a, 0, "old"), req_str(a, 1, "new"), opt_int(a, 2, "count", -1)));
        });
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase")
        return method([s, name](CallArgs& a) {
            a.check(0, {});
            if (name == "upper") return Value::string(pystr::upper(s));
            if (name == "lower") return Value::string(pystr::lower(s));
            if (name == "title") return Value::string(pystr::title_method(s));
            if (name == "capitalize") return Value::string(pystr::capitalize(s));
            auto u = pystr::decode(s);
            std::string out;
            for (char32_t c : u) {
                std::string one;
                pystr::append_utf8(one, c);
                std::string up = pystr::upper(one);
                out += up != one ? up : pystr::lower(one);
            }
            return Value::string(out);
        });
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
        return method([s, name](CallArgs& a) {
            a.check(1, {});
            const std::string& sub = req_str(a, 0, "sub");
            if (name == "count") return Value::integer(pystr::count(s, sub));
            int64_t r = pystr::find(s, sub, name[0] == 'r');
            if (r < 0 && (name == "index" || name == "rindex")) fail("substring not found");
            return Value::integer(r);
        });
    if (name == "join")
        return method([s](CallArgs& a) {
            a.check(1, {});
            if (a.pos.empty()) fail("join() takes exactly one argument");
            std::string out;
            bool first = true;
            for (const auto& x : iterate(a.pos[0])) {
                if (!x.is_string()) fail(std::string("sequence item: expected str instance, ") + type_name(x) + " found");
                if (!first) out += s;
                first = false;
                out += x.s;
            }
            return Value::string(out);
        });
    if (name == "format") return method([s](CallArgs& a) { return Value::string(py_format(s, a)); });
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
        name == "isupper" || name == "isnumeric" || name == "isdecimal")
        return method([s, name](CallArgs& a) {
            a.check(0, {});
            auto u = pystr::decode(s);
            if (u.empty()) return Value::boolean(false);
            if (name == "islower" || name == "isupper") {
                bool cased = false;
                for (char32_t c : u) {
                    std::string one;
                    pystr::append_utf8(one, c);
                    std::string lo = pystr::lower(one), up = pystr::upper(one);
                    if (lo == up) continue;
                    cased = true;
                    if ((name == "islower") != (one == lo)) return Value::boolean(false);
                }
                return Value::boolean(cased);
            }
            for (char32_t c : u) {
                bool digit = c >= '0' && c <= '9', alpha = (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
                bool ok = name == "isspace" ? pystr::is_space(c)
                          : name == "isalpha" ? alpha || (c >= 0x80 && pystr::lower(pystr::encode({c})) != pystr::upper(pystr::encode({c})))
                          : name == "isalnum" ? alpha || digit
                                              : digit;
                if (!ok) return Value::boolean(false);
            }
            return Value::boolean(true);
        });
    return Value::undefined(name);
}

Value dict_method(const Value& obj, const std::string& name) {
    auto d = obj.dict;
    if (name == "items" || name == "keys" || name == "values")
        return Value::function("dict." + name, [d, name](CallArgs& a) {
            a.check(0, {});
            List out;
            for (const auto& [k, v] : *d) {
                if (name == "items") out.push_back(Value::make_tuple({k, v}));
                else out.push_back(name == "keys" ? k : v);
            }
            return Value::make_list(std::move(out));
        });
    if (name == "get")
        return Value::function("dict.get", [d](CallArgs& a) {
            a.check(2, {});
            if (a.pos.empty()) fail("get expected at least 1 argument, got 0");
            for (const auto& [k, v] : *d)
                if (equals(k, a.pos[0])) return v;
            return a.pos.size() > 1 ? a.pos[1] : Value::none();
        });
    if (name == "copy")
        return Value::function("dict.copy", [d](CallArgs& a) {
            a.check(0, {});
            return Value::make_dict(*d);
        });
    return Value::undefined(name);  // also the mutating methods, which the immutable sandbox refuses
}

Value list_method(const Value& obj, const std::string& name) {
    auto l = obj.list;
    if (name == "index" || name == "count")
        return Value::function("list." + name, [l, name](CallArgs& a) {
            a.check(1, {});
            if (a.pos.empty()) fail(name + "() takes exactly one argument");
            int64_t n = 0;
            for (size_t k = 0; k < l->size(); ++k) {
                if (!equals((*l)[k], a.pos[0])) continue;
                if (name == "index") return Value::integer(static_cast<int64_t>(k));
                ++n;
            }
            if (name == "index") fail("value is not in list");
            return Value::integer(n);
        });
    return Value::undefined(name);
}

const Value* dict_lookup(const Value& d, const Value& key) {
    if (key.is_string()) return d.find(key.s);
    for (const auto& [k, v] : *d.dict)
        if (equals(k, key)) return &v;
    return nullptr;
}

int64_t norm_index(int64_t i, size_t n) { return i < 0 ? i + static_cast<int64_t>(n) : i; }

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
    switch (obj.kind) {
    case Kind::Undefined: undefined_error(obj);
    case Kind::String: return string_method(obj, name);
    case Kind::Dict: {
        Value m = dict_method(obj, name);
        if (!m.is_undefined()) return m;
        static const char* const kMutators[] = {"pop", "popitem", "update", "clear", "setdefault", "fromkeys"};
        for (const char* mut : kMutators)
            if (name == mut) return Value::undefined(name);
        if (const Value* v = obj.find(name)) return *v;
        return Value::undefined(name);
    }
    case Kind::Namespace: {
        if (const Value* v = obj.find(name)) return *v;
        return Value::undefined(name);
    }
    case Kind::List:
    case Kind::Tuple: return list_method(obj, name);
    default: return Value::undefined(name);
    }
}

Value get_item(const Value& obj, const Value& key) {
    switch (obj.kind) {
    case Kind::Undefined: undefined_error(obj);
    case Kind::Dict:
        if (const Value* v = dict_lookup(obj, key)) return *v;
        break;
    case Kind::List:
    case Kind::Tuple:
        if (key.kind == Kind::Int || key.kind == Kind::Bool) {
            int64_t i = norm_index(key.i, obj.list->size());
            if (i >= 0 && i < static_cast<int64_t>(obj.list->size())) return (*obj.list)[static_cast<size_t>(i)];
            return Value::undefined();
        }
        break;
    case Kind::String:
        if (key.kind == Kind::Int || key.kind == Kind::Bool) {
            auto u = pystr::decode(obj.s);
            int64_t i = norm_index(key.i, u.size());
            if (i >= 0 && i < static_cast<int64_t>(u.size())) return Value::string(pystr::encode(u.substr(static_cast<size_t>(i), 1)));
            return Value::undefined();
        }
        break;
    default: break;
    }
    if (key.is_string() && obj.kind != Kind::Dict) return get_attr(obj, key.s);
    if (key.is_string() && obj.kind == Kind::Dict) {
        Value m = dict_method(obj, key.s);
        if (!m.is_undefined()) return m;
    }
    return Value::undefined(key.is_string() ? key.s : to_str(key));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
    auto bound = [](const Value& v) -> std::optional<int64_t> {
        if (v.is_none() || v.is_undefined()) return std::nullopt;
        if (v.kind != Kind::Int && v.kind != Kind::Bool) fail("slice indices must be integers or None");
        return v.i;
    };
    if (obj.is_undefined()) undefined_error(obj);
    std::vector<int64_t> idx;
    try {
        size_t n = obj.is_string() ? 0 : (obj.list ? obj.list->size() : 0);
        std::u32string u;
        if (obj.is_string()) {
            u = pystr::decode(obj.s);
            n = u.size();
        } else if (!obj.is_sequence()) {
            fail(std::string("'") + type_name(obj) + "' object is not subscriptable");
        }
        idx = pystr::slice_indices(static_cast<int64_t>(n), bound(start), bound(stop), bound(step));
        if (obj.is_string()) {
            std::u32string r;
            for (int64_t i : idx) r += u[static_cast<size_t>(i)];
            return Value::string(pystr::encode(r));
        }
    } catch (const std::invalid_argument& e) {
        fail(e.what());
    }
    List out;
    for (int64_t i : idx) out.push_back((*obj.list)[static_cast<size_t>(i)]);
    return obj.kind == Kind::Tuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
}

List iterate(const Value& v) {
    switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::List:
    case Kind::Tuple: return *v.list;
    case Kind::Dict: {
        List out;
        for (const auto& [k, x] : *v.dict) out.push_back(k);
        return out;
    }
    case Kind::String: {
        List out;
        for (char32_t c : pystr::decode(v.s)) out.push_back(Value::string(pystr::encode(std::u32string(1, c))));
        return out;
    }
    default: fail(std::string("'") + type_name(v) + "' object is not iterable");
    }
}

bool contains(const Value& c, const Value& item) {
    switch (c.kind) {
    case Kind::Undefined: return false;
    case Kind::String:
        if (!item.is_string()) fail(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
        return c.s.find(item.s) != std::string::npos;
    case Kind::List:
    case Kind::Tuple:
        for (const auto& x : *c.list)
            if (equals(x, item)) return true;
        return false;
    case Kind::Dict: return dict_lookup(c, item) != nullptr;
    default: fail(std::string("argument of type '") + type_name(c) + "' is not iterable");
    }
}

// Python ints do not overflow; int64 covers every value a chat template computes, so overflow is an error.
template <typename Op>
static int64_t checked(Op op, int64_t a, int64_t b) {
    int64_t r = 0;
    if (op(a, b, &r)) fail("integer overflow");
    return r;
}
static bool add_ovf(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
static bool sub_ovf(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
static bool mul_ovf(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

// Python's str % args for the conversions templates use (%s %r %d %i %%).
static std::string percent_format(const std::string& fmt, const Value& args) {
    List items = args.kind == Kind::Tuple ? *args.list : List{args};
    std::string out;
    size_t k = 0;
    for (size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] != '%') {
            out += fmt[i];
            continue;
        }
        if (++i >= fmt.size()) fail("incomplete format");
        char c = fmt[i];
        if (c == '%') {
            out += '%';
            continue;
        }
        if (k >= items.size()) fail("not enough arguments for format string");
        const Value& v = items[k++];
        if (c == 's') out += to_str(v);
        else if (c == 'r') out += to_repr(v);
        else if (c == 'd' || c == 'i') {
            if (!v.is_number()) fail("%d format: a real number is required");
            out += std::to_string(v.kind == Kind::Float ? static_cast<int64_t>(v.f) : v.i);
        } else {
            fail(std::string("unsupported format character '") + c + "'");
        }
    }
    if (k < items.size()) fail("not all arguments converted during string formatting");
    return out;
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") {
        std::string r = to_str(a) + to_str(b);
        if (r.size() > kMaxValueBytes) fail("string too large");
        return Value::string(std::move(r));
    }
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    bool nums = a.is_number() && b.is_number();
    bool ints = nums && a.kind != Kind::Float && b.kind != Kind::Float;
    auto type_error = [&]() -> Value {
        fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
    };
    if (op == "+") {
        if (ints) return Value::integer(checked(add_ovf, a.i, b.i));
        if (nums) return Value::number(a.f + b.f);
        if (a.is_string() && b.is_string()) {
            if (a.s.size() + b.s.size() > kMaxValueBytes) fail("string too large");
            return Value::string(a.s + b.s);
        }
        if (a.kind == b.kind && a.is_sequence()) {
            List l = *a.list;
            l.insert(l.end(), b.list->begin(), b.list->end());
            return a.kind == Kind::Tuple ? Value::make_tuple(std::move(l)) : Value::make_list(std::move(l));
        }
        return type_error();
    }
    if (op == "-") {
        if (ints) return Value::integer(checked(sub_ovf, a.i, b.i));
        if (nums) return Value::number(a.f - b.f);
        return type_error();
    }
    if (op == "*") {
        if (ints) return Value::integer(checked(mul_ovf, a.i, b.i));
        if (nums) return Value::number(a.f * b.f);
        const Value& seq = a.is_number() ? b : a;
        const Value& n = a.is_number() ? a : b;
        if (n.kind == Kind::Float || !n.is_number()) return type_error();
        int64_t times = std::max<int64_t>(0, n.i);
        if (seq.is_string()) {
            if (times && seq.s.size() * static_cast<size_t>(times) > kMaxValueBytes) fail("string too large");
            std::string out;
            for (int64_t k = 0; k < times; ++k) out += seq.s;
            return Value::string(std::move(out));
        }
        if (seq.is_sequence()) {
            if (times && seq.list->size() * static_cast<size_t>(times) > kMaxValueBytes / 64) fail("list too large");
            List l;
            for (int64_t k = 0; k < times; ++k) l.insert(l.end(), seq.list->begin(), seq.list->end());
            return seq.kind == Kind::Tuple ? Value::make_tuple(std::move(l)) : Value::make_list(std::move(l));
        }
        return type_error();
    }
    if (op == "/") {
        if (!nums) return type_error();
        if (b.f == 0.0) fail("division by zero");
        return Value::number(a.f / b.f);
    }
    if (op == "//" || op == "%") {
        if (op == "%" && a.is_string()) return Value::string(percent_format(a.s, b));
        if (!nums) return type_error();
        if (ints) {
            if (b.i == 0) fail("integer division or modulo by zero");
            if (a.i == INT64_MIN && b.i == -1) fail("integer overflow");
            int64_t q = a.i / b.i, m = a.i % b.i;
            if (m != 0 && ((m < 0) != (b.i < 0))) {  // Python floors toward negative infinity
                --q;
                m += b.i;
            }
            return Value::integer(op == "//" ? q : m);
        }
        if (b.f == 0.0) fail("float division by zero");
        // CPython's float_divmod, so results agree to the last bit.
        double m = std::fmod(a.f, b.f);
        double div = (a.f - m) / b.f;
        if (m != 0.0) {
            if ((b.f < 0) != (m < 0)) {
                m += b.f;
                div -= 1.0;
            }
        } else {
            m = std::copysign(0.0, b.f);
        }
        if (op == "%") return Value::number(m);
        if (div == 0.0) return Value::number(std::copysign(0.0, a.f / b.f));
        double fl = std::floor(div);
        if (div - fl > 0.5) fl += 1.0;
        return Value::number(fl);
    }
    if (op == "**") {
        if (!nums) return type_error();
        if (ints && b.i >= 0) {
            int64_t acc = 1;
            for (int64_t k = 0; k < b.i; ++k) {
                acc = checked(mul_ovf, acc, a.i);
                if (acc == 0 || acc == 1) break;
            }
            if (a.i == -1) acc = (b.i % 2) ? -1 : 1;
            return Value::integer(acc);
        }
        if (a.f == 0.0 && b.f < 0) fail("0.0 cannot be raised to a negative power");
        return Value::number(std::pow(a.f, b.f));
    }
    fail("unknown operator " + op);
}

Value call_value(const Value& f, CallArgs& args) {
    if (f.kind == Kind::Callable) {
        args.callee = f.fn->name;
        return f.fn->fn(args);
    }
    if (f.is_undefined()) fail("'" + (f.s.empty() ? std::string("value") : f.s) + "' is undefined or not callable");
    fail(std::string("'") + type_name(f) + "' object is not callable");
}

static Value make_dict_from_args(CallArgs& a, bool is_namespace) {
    Dict d;
    auto put = [&](const Value& k, const Value& v) {
        if (is_namespace && k.is_string() && !k.s.empty() && k.s[0] == '_')
            fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + k.s + "'");
        for (auto& [k2, v2] : d)
            if (equals(k2, k)) {
                v2 = v;
                return;
            }
        d.emplace_back(k, v);
    };
    if (a.pos.size() > 1) fail(a.callee + " expected at most 1 argument");
    if (!a.pos.empty()) {
        const Value& src = a.pos[0];
        if (src.kind == Kind::Dict || src.kind == Kind::Namespace) {
            for (const auto& [k, v] : *src.dict) put(k, v);
        } else {
            for (const auto& item : iterate(src)) {
                List pair = iterate(item);
                if (pair.size() != 2) fail("dictionary update sequence element has wrong length");
                put(pair[0], pair[1]);
            }
        }
    }
    for (const auto& [k, v] : a.kw) put(Value::string(k), v);
    return is_namespace ? Value::make_namespace(std::move(d)) : Value::make_dict(std::move(d));
}

void add_globals(std::unordered_map<std::string, Value>& vars) {
    vars["range"] = Value::function("range", [](CallArgs& a) {
        a.check(3, {});
        if (a.pos.empty()) fail("range expected at least 1 argument, got 0");
        for (const auto& v : a.pos)
            if (v.kind != Kind::Int && v.kind != Kind::Bool)
                fail(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer");
        int64_t start = a.pos.size() > 1 ? a.pos[0].i : 0, stop = a.pos.size() > 1 ? a.pos[1].i : a.pos[0].i;
        int64_t step = a.pos.size() > 2 ? a.pos[2].i : 1;
        if (step == 0) fail("range() arg 3 must not be zero");
        List out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (static_cast<int64_t>(out.size()) >= kMaxRange)
                fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
            out.push_back(Value::integer(i));
        }
        return Value::make_list(std::move(out));
    });
    vars["namespace"] = Value::function("namespace", [](CallArgs& a) { return make_dict_from_args(a, true); });
    vars["dict"] = Value::function("dict", [](CallArgs& a) { return make_dict_from_args(a, false); });
    vars["raise_exception"] = Value::function("raise_exception", [](CallArgs& a) -> Value {
        a.check(1, {"message"});
        const Value* m = a.get(0, "message");
        if (!m) fail("raise_exception() missing 1 required positional argument: 'message'");
        throw TemplateRaise(to_str(*m));
    });
    vars["strftime_now"] = Value::function("strftime_now", [](CallArgs& a) {
        a.check(1, {"format"});
        const std::string& fmt = req_str(a, 0, "format");
        std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
        std::tm tm{};
        localtime_r(&now, &tm);
        std::string buf(256 + fmt.size() * 8, '\0');
        size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
        buf.resize(n);
        return Value::string(buf);
    });
}

}  // namespace grimoire::jinja
