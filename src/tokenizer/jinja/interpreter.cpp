#include "tokenizer/jinja/interpreter.h"

#include "tokenizer/jinja/builtins.h"

namespace grimoire::jinja {

namespace {

// Macro recursion limit: real templates recurse only as deep as a JSON schema nests.
constexpr int kMaxCallDepth = 100;
// A rendered prompt larger than this is a runaway template, not a prompt.
constexpr size_t kMaxOutputBytes = size_t{256} << 20;

struct Scope;
using ScopePtr = std::shared_ptr<Scope>;

struct Scope {
    ScopePtr parent;
    std::unordered_map<std::string, Value> vars;

    const Value* lookup(const std::string& name) const {
        for (const Scope* s = this; s; s = s->parent.get()) {
            auto it = s->vars.find(name);
            if (it != s->vars.end()) return &it->second;
        }
        return nullptr;
    }
};

ScopePtr child(const ScopePtr& parent) {
    auto s = std::make_shared<Scope>();
    s->parent = parent;
    return s;
}

enum class Flow { Normal, Break, Continue };

// Adds "template:LINE:COL:" to errors raised below a node, once.
[[noreturn]] void relocate(const Node& n, const Error& e) {
    std::string msg = e.what();
    if (msg.rfind("template:", 0) == 0) throw;
    throw Error("template:" + std::to_string(n.line) + ":" + std::to_string(n.col) + ": " + msg);
}

class Renderer {
public:
    Flow exec(const Body& body, const ScopePtr& scope, std::string& out) {
        for (const auto& n : body) {
            Flow f = exec_node(*n, scope, out);
            if (f != Flow::Normal) return f;
        }
        return Flow::Normal;
    }

    Flow exec_node(const Node& n, const ScopePtr& scope, std::string& out) {
        try {
            return exec_inner(n, scope, out);
        } catch (const TemplateRaise&) {
            throw;
        } catch (const Error& e) {
            relocate(n, e);
        }
    }

private:
    int call_depth_ = 0;

    static void emit(std::string& out, const std::string& s) {
        if (out.size() + s.size() > kMaxOutputBytes) fail("rendered output too large");
        out += s;
    }

    Flow exec_inner(const Node& n, const ScopePtr& scope, std::string& out) {
        switch (n.kind) {
        case NodeKind::Data: emit(out, n.value.s); return Flow::Normal;
        case NodeKind::Print: emit(out, to_str(eval(*n.a, scope))); return Flow::Normal;
        case NodeKind::If:
            for (size_t k = 0; k < n.args.size(); ++k)
                if (eval(*n.args[k], scope).truthy()) return exec(n.bodies[k], scope, out);
            return exec(n.else_body, scope, out);
        case NodeKind::For: return exec_for(n, scope, out);
        case NodeKind::Set: assign(*n.a, eval(*n.b, scope), scope); return Flow::Normal;
        case NodeKind::SetBlock: {
            std::string body;
            exec(n.body, scope, body);
            Value v = Value::string(std::move(body));
            if (n.c) v = apply_chain(*n.c, v, scope);
            assign(*n.a, v, scope);
            return Flow::Normal;
        }
        case NodeKind::FilterBlock: {
            std::string body;
            exec(n.body, child(scope), body);
            emit(out, to_str(apply_chain(*n.c, Value::string(std::move(body)), scope)));
            return Flow::Normal;
        }
        case NodeKind::Macro: scope->vars[n.name] = make_macro(n, scope); return Flow::Normal;
        case NodeKind::CallBlock: {
            const Node& call = *n.a;
            CallArgs args = eval_args(call, scope);
            args.kw.emplace_back("caller", make_caller(n, scope));
            Value f = eval(*call.a, scope);
            emit(out, to_str(call_value(f, args)));
            return Flow::Normal;
        }
        case NodeKind::With: {
            auto s = child(scope);
            for (size_t k = 0; k < n.params.size(); ++k) s->vars[n.params[k]] = eval(*n.args[k], scope);
            return exec(n.body, s, out);
        }
        case NodeKind::Break: return Flow::Break;
        case NodeKind::Continue: return Flow::Continue;
        default: fail("unexpected expression node in statement position");
        }
    }

    Flow exec_for(const Node& n, const ScopePtr& scope, std::string& out) {
        List items = iterate(eval(*n.b, scope));
        if (n.c) {  // `for x in xs if cond`: filtered before the loop, so loop.length counts kept items
            List kept;
            for (const auto& item : items) {
                auto s = child(scope);
                assign(*n.a, item, s);
                if (eval(*n.c, s).truthy()) kept.push_back(item);
            }
            items = std::move(kept);
        }
        if (items.empty()) {
            exec(n.else_body, child(scope), out);
            return Flow::Normal;
        }
        const int64_t len = static_cast<int64_t>(items.size());
        for (int64_t i = 0; i < len; ++i) {
            auto s = child(scope);
            assign(*n.a, items[static_cast<size_t>(i)], s);
            if (n.uses_loop) s->vars["loop"] = loop_object(items, i);
            Flow f = exec(n.body, s, out);
            if (f == Flow::Break) break;
        }
        return Flow::Normal;
    }

    static Value loop_object(const List& items, int64_t i) {
        const int64_t len = static_cast<int64_t>(items.size());
        Dict loop;
        auto put = [&](const char* k, Value v) { loop.emplace_back(Value::string(k), std::move(v)); };
        put("index", Value::integer(i + 1));
        put("index0", Value::integer(i));
        put("revindex", Value::integer(len - i));
        put("revindex0", Value::integer(len - i - 1));
        put("first", Value::boolean(i == 0));
        put("last", Value::boolean(i == len - 1));
        put("length", Value::integer(len));
        put("depth", Value::integer(1));
        put("depth0", Value::integer(0));
        if (i > 0) put("previtem", items[static_cast<size_t>(i - 1)]);
        if (i + 1 < len) put("nextitem", items[static_cast<size_t>(i + 1)]);
        put("cycle", Value::function("loop.cycle", [i](CallArgs& a) {
                if (a.pos.empty()) fail("no items for cycling given");
                return a.pos[static_cast<size_t>(i) % a.pos.size()];
            }));
        return Value::make_dict(std::move(loop));
    }

    void assign(const Node& target, const Value& v, const ScopePtr& scope) {
        switch (target.kind) {
        case NodeKind::Name: scope->vars[target.name] = v; return;
        case NodeKind::TupleLit: {
            List items = iterate(v);
            if (items.size() != target.args.size())
                fail(items.size() > target.args.size() ? "too many values to unpack"
                                                       : "not enough values to unpack");
            for (size_t k = 0; k < items.size(); ++k) assign(*target.args[k], items[k], scope);
            return;
        }
        case NodeKind::NSRef: {
            const Value* ns = scope->lookup(target.name);
            if (!ns || ns->kind != Kind::Namespace) fail("cannot assign attribute on non-namespace object");
            if (!target.attr.empty() && target.attr[0] == '_')
                fail("Chat templates cannot store underscore-prefixed attributes on a namespace");
            for (auto& [k, x] : *ns->dict)
                if (k.is_string() && k.s == target.attr) {
                    x = v;
                    return;
                }
            ns->dict->emplace_back(Value::string(target.attr), v);
            return;
        }
        default: fail("can't assign to this target");
        }
    }

    CallArgs eval_args(const Node& n, const ScopePtr& scope) {
        CallArgs a;
        for (const auto& x : n.args) a.pos.push_back(eval(*x, scope));
        for (const auto& [k, x] : n.kwargs) a.kw.emplace_back(k, eval(*x, scope));
        if (n.b)
            for (auto& x : iterate(eval(*n.b, scope))) a.pos.push_back(std::move(x));
        if (n.c) {
            Value d = eval(*n.c, scope);
            if (d.kind != Kind::Dict) fail(std::string("argument after ** must be a mapping, not ") + type_name(d));
            for (const auto& [k, x] : *d.dict) {
                if (!k.is_string()) fail("keywords must be strings");
                for (const auto& [k2, x2] : a.kw)
                    if (k2 == k.s) fail("got multiple values for keyword argument '" + k.s + "'");
                a.kw.emplace_back(k.s, x);
            }
        }
        return a;
    }

    // Applies a filter chain parsed with a null innermost input (filter blocks, set blocks) to `input`.
    Value apply_chain(const Node& f, const Value& input, const ScopePtr& scope) {
        Value v = f.a ? apply_chain(*f.a, input, scope) : input;
        CallArgs a = eval_args(f, scope);
        return apply_filter(f.name, v, a);
    }

    struct DepthGuard {
        int& d;
        explicit DepthGuard(int& depth) : d(depth) {
            if (++d > kMaxCallDepth) {
                --d;
                fail("maximum macro recursion depth exceeded");
            }
        }
        ~DepthGuard() { --d; }
    };

    // Binds a call's arguments to a macro-style signature in a fresh scope and renders `body`.
    Value invoke(const Node& sig, const ScopePtr& closure, CallArgs& a) {
        DepthGuard g(call_depth_);
        auto s = child(closure);
        const size_t np = sig.params.size(), nd = sig.args.size();
        const bool want_varargs = sig.uses_varargs, want_kwargs = sig.uses_kwargs;
        if (a.pos.size() > np && !want_varargs)
            fail("macro '" + sig.name + "' takes not more than " + std::to_string(np) + " argument(s)");
        std::vector<bool> bound(np, false);
        for (size_t k = 0; k < np && k < a.pos.size(); ++k) {
            s->vars[sig.params[k]] = a.pos[k];
            bound[k] = true;
        }
        Dict extra_kw;
        for (auto& [key, val] : a.kw) {
            bool hit = false;
            for (size_t k = 0; k < np; ++k)
                if (sig.params[k] == key) {
                    if (bound[k]) fail("macro '" + sig.name + "' got multiple values for argument '" + key + "'");
                    s->vars[key] = val;
                    bound[k] = hit = true;
                }
            if (hit) continue;
            if (key == "caller") {
                s->vars["caller"] = val;
            } else if (want_kwargs) {
                extra_kw.emplace_back(Value::string(key), val);
            } else {
                fail("macro '" + sig.name + "' takes no keyword argument '" + key + "'");
            }
        }
        for (size_t k = 0; k < np; ++k) {
            if (bound[k]) continue;
            size_t first_default = np - nd;
            s->vars[sig.params[k]] = k >= first_default ? eval(*sig.args[k - first_default], s) : Value::undefined(sig.params[k]);
        }
        if (want_varargs) {
            List rest;
            for (size_t k = np; k < a.pos.size(); ++k) rest.push_back(a.pos[k]);
            s->vars["varargs"] = Value::make_tuple(std::move(rest));
        }
        if (want_kwargs) s->vars["kwargs"] = Value::make_dict(std::move(extra_kw));
        std::string out;
        exec(sig.body, s, out);
        return Value::string(std::move(out));
    }

    Value make_macro(const Node& n, const ScopePtr& closure) {
        // The closure keeps the defining scope alive; the scope holds the macro: a cycle that lives only as
        // long as one render call, which is acceptable for a renderer that is thrown away afterwards.
        std::weak_ptr<Scope> weak = closure;
        return Value::function(n.name, [this, &n, weak](CallArgs& a) {
            auto s = weak.lock();
            if (!s) fail("macro called after its template finished rendering");
            return invoke(n, s, a);
        });
    }

    Value make_caller(const Node& n, const ScopePtr& scope) {
        return Value::function("caller", [this, &n, scope](CallArgs& a) { return invoke(n, scope, a); });
    }

    Value eval(const Node& n, const ScopePtr& scope) {
        switch (n.kind) {
        case NodeKind::Const: return n.value;
        case NodeKind::Name: {
            const Value* v = scope->lookup(n.name);
            return v ? *v : Value::undefined(n.name);
        }
        case NodeKind::Getattr: return get_attr(eval(*n.a, scope), n.name);
        case NodeKind::Getitem: {
            Value obj = eval(*n.a, scope);
            if (n.b->kind == NodeKind::Slice) {
                const Node& sl = *n.b;
                auto part = [&](const NodePtr& p) { return p ? eval(*p, scope) : Value::none(); };
                return get_slice(obj, part(sl.a), part(sl.b), part(sl.c));
            }
            return get_item(obj, eval(*n.b, scope));
        }
        case NodeKind::Call: {
            Value f = eval(*n.a, scope);
            CallArgs a = eval_args(n, scope);
            return call_value(f, a);
        }
        case NodeKind::Filter: {
            Value v = n.a ? eval(*n.a, scope) : Value::undefined();
            CallArgs a = eval_args(n, scope);
            return apply_filter(n.name, v, a);
        }
        case NodeKind::Test: {
            Value v = eval(*n.a, scope);
            CallArgs a = eval_args(n, scope);
            return Value::boolean(apply_test(n.name, v, a));
        }
        case NodeKind::Not: return Value::boolean(!eval(*n.a, scope).truthy());
        case NodeKind::Neg:
        case NodeKind::Pos: {
            Value v = eval(*n.a, scope);
            bool neg = n.kind == NodeKind::Neg;
            if (v.kind == Kind::Float) return Value::number(neg ? -v.f : v.f);
            if (v.kind == Kind::Int || v.kind == Kind::Bool) {
                if (neg && v.i == INT64_MIN) fail("integer overflow");
                return Value::integer(neg ? -v.i : v.i);
            }
            if (v.is_undefined()) fail("'" + v.s + "' is undefined");
            fail(std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" + type_name(v) + "'");
        }
        case NodeKind::BinOp: {
            if (n.name == "and" || n.name == "or") {
                Value l = eval(*n.a, scope);
                if (l.truthy() == (n.name == "or")) return l;
                return eval(*n.b, scope);
            }
            Value l = eval(*n.a, scope);
            return binary_op(n.name, l, eval(*n.b, scope));
        }
        case NodeKind::Compare: {
            Value l = eval(*n.a, scope);
            for (size_t k = 0; k < n.ops.size(); ++k) {
                Value r = eval(*n.args[k], scope);
                const std::string& op = n.ops[k];
                bool ok;
                if (op == "==") ok = equals(l, r);
                else if (op == "!=") ok = !equals(l, r);
                else if (op == "in") ok = contains(r, l);
                else if (op == "notin") ok = !contains(r, l);
                else {
                    int c = compare(l, r);
                    ok = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
                }
                if (!ok) return Value::boolean(false);
                l = std::move(r);
            }
            return Value::boolean(true);
        }
        case NodeKind::CondExpr:
            if (eval(*n.a, scope).truthy()) return eval(*n.b, scope);
            return n.c ? eval(*n.c, scope) : Value::undefined();
        case NodeKind::ListLit:
        case NodeKind::TupleLit: {
            List items;
            for (const auto& x : n.args) items.push_back(eval(*x, scope));
            return n.kind == NodeKind::ListLit ? Value::make_list(std::move(items)) : Value::make_tuple(std::move(items));
        }
        case NodeKind::DictLit: {
            Dict d;
            for (size_t k = 0; k + 1 < n.args.size(); k += 2) {
                Value key = eval(*n.args[k], scope);
                if (key.kind == Kind::List || key.kind == Kind::Dict || key.kind == Kind::Undefined)
                    fail(std::string("unhashable type: '") + type_name(key) + "'");
                Value val = eval(*n.args[k + 1], scope);
                bool replaced = false;
                for (auto& [k2, v2] : d)
                    if (equals(k2, key)) {
                        v2 = val;
                        replaced = true;
                    }
                if (!replaced) d.emplace_back(std::move(key), std::move(val));
            }
            return Value::make_dict(std::move(d));
        }
        default: fail("unexpected statement node in expression position");
        }
    }
};

}  // namespace

std::string render(const Template& tmpl, const std::unordered_map<std::string, Value>& vars) {
    auto globals = std::make_shared<Scope>();
    add_globals(globals->vars);
    auto context = child(globals);
    for (const auto& [k, v] : vars) context->vars[k] = v;
    auto root = child(context);
    Renderer r;
    std::string out;
    r.exec(tmpl.body, root, out);
    return out;
}

}  // namespace grimoire::jinja
