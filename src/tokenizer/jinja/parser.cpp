#include "tokenizer/jinja/parser.h"

#include <set>

#include "tokenizer/jinja/lexer.h"

namespace grimoire::jinja {

namespace {

// Nesting limit for expressions and blocks: deep enough for any real template, shallow enough that garbage
// input cannot overflow the native stack.
constexpr int kMaxDepth = 200;

class Parser {
public:
    explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

    std::unique_ptr<Template> run() {
        auto tmpl = std::make_unique<Template>();
        tmpl->body = subparse({});
        if (cur().type != Tok::Eof) fail_here("unexpected '" + cur().text + "'");
        return tmpl;
    }

private:
    std::vector<Token> t_;
    size_t i_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;

    struct DepthGuard {
        Parser& p;
        explicit DepthGuard(Parser& parser) : p(parser) {
            if (++p.depth_ > kMaxDepth) p.fail_here("template nesting too deep");
        }
        ~DepthGuard() { --p.depth_; }
    };

    const Token& cur() const { return t_[i_]; }
    const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
    const Token& next() {
        const Token& t = t_[i_];
        if (i_ + 1 < t_.size()) ++i_;
        return t;
    }

    [[noreturn]] void fail_at(const Token& t, const std::string& msg) const {
        throw Error("template:" + std::to_string(t.line) + ":" + std::to_string(t.col) + ": " + msg);
    }
    [[noreturn]] void fail_here(const std::string& msg) const { fail_at(cur(), msg); }

    static std::string describe(const Token& t) {
        switch (t.type) {
        case Tok::Eof: return "end of template";
        case Tok::VarEnd: return "end of print statement";
        case Tok::BlockEnd: return "end of statement block";
        case Tok::Data: return "template data";
        default: return t.text;
        }
    }

    bool is_name(const char* n, size_t k = 0) const {
        const Token& t = peek(k);
        return t.type == Tok::Name && t.text == n;
    }
    bool is_op(const char* o) const { return cur().type == Tok::Op && cur().text == o; }
    bool skip_op(const char* o) {
        if (!is_op(o)) return false;
        next();
        return true;
    }
    bool skip_name(const char* n) {
        if (!is_name(n)) return false;
        next();
        return true;
    }
    void expect_op(const char* o) {
        if (!is_op(o)) fail_here(std::string("expected '") + o + "', got '" + describe(cur()) + "'");
        next();
    }
    const Token& expect_name() {
        if (cur().type != Tok::Name) fail_here("expected a name, got '" + describe(cur()) + "'");
        return next();
    }
    void expect_name(const char* n) {
        if (!is_name(n)) fail_here(std::string("expected '") + n + "', got '" + describe(cur()) + "'");
        next();
    }
    void expect_block_end() {
        if (cur().type != Tok::BlockEnd) fail_here("expected end of statement block, got '" + describe(cur()) + "'");
        next();
    }

    NodePtr node(NodeKind k, const Token& at) {
        auto n = std::make_unique<Node>();
        n->kind = k;
        n->line = at.line;
        n->col = at.col;
        return n;
    }

    // ---- statements -------------------------------------------------------------------------------------

    // Parses until a block tag whose name is in `ends`; leaves the stream on that name.
    Body subparse(const std::set<std::string>& ends) {
        DepthGuard g(*this);
        Body body;
        while (cur().type != Tok::Eof) {
            const Token& t = cur();
            if (t.type == Tok::Data) {
                auto n = node(NodeKind::Data, t);
                n->value = Value::string(t.text);
                body.push_back(std::move(n));
                next();
            } else if (t.type == Tok::VarBegin) {
                next();
                auto n = node(NodeKind::Print, t);
                n->a = parse_tuple(false, true, {}, false);
                if (cur().type != Tok::VarEnd) fail_here("expected end of print statement, got '" + describe(cur()) + "'");
                next();
                body.push_back(std::move(n));
            } else if (t.type == Tok::BlockBegin) {
                next();
                if (cur().type == Tok::Name && ends.count(cur().text)) return body;
                parse_statement(body);
            } else {
                fail_here("unexpected '" + describe(t) + "'");
            }
        }
        if (!ends.empty()) {
            std::string names;
            for (const auto& e : ends) names += (names.empty() ? "'" : " or '") + e + "'";
            fail_here("unexpected end of template, expected " + names);
        }
        return body;
    }

    // Body of a block statement: `%}` then statements up to one of `ends` (the end tag name is left current).
    Body statements(const std::set<std::string>& ends) {
        expect_block_end();
        Body b = subparse(ends);
        return b;
    }

    void parse_statement(Body& out) {
        const Token& t = cur();
        if (t.type != Tok::Name) fail_here("tag name expected");
        const std::string& kw = t.text;
        if (kw == "if") return out.push_back(parse_if());
        if (kw == "for") return out.push_back(parse_for());
        if (kw == "set") return out.push_back(parse_set());
        if (kw == "macro") return out.push_back(parse_macro());
        if (kw == "call") return out.push_back(parse_call_block());
        if (kw == "filter") return out.push_back(parse_filter_block());
        if (kw == "with") return out.push_back(parse_with());
        if (kw == "generation") {  // transformers' AssistantTracker tag: renders its body unchanged
            next();
            Body b = statements({"endgeneration"});
            next();
            expect_block_end();
            for (auto& n : b) out.push_back(std::move(n));
            return;
        }
        if (kw == "print") {
            auto n = node(NodeKind::Print, next());
            auto tup = node(NodeKind::TupleLit, t);
            while (cur().type != Tok::BlockEnd) {
                if (!tup->args.empty()) expect_op(",");
                tup->args.push_back(parse_expression(true));
            }
            next();
            // print a, b renders each expression in turn
            for (auto& e : tup->args) {
                auto p = node(NodeKind::Print, t);
                p->a = std::move(e);
                out.push_back(std::move(p));
            }
            return;
        }
        if (kw == "break" || kw == "continue") {
            if (loop_depth_ == 0) fail_here("'" + kw + "' outside of a loop");
            auto n = node(kw == "break" ? NodeKind::Break : NodeKind::Continue, next());
            expect_block_end();
            return out.push_back(std::move(n));
        }
        if (kw == "extends" || kw == "include" || kw == "import" || kw == "from" || kw == "block" ||
            kw == "autoescape")
            fail_here("unsupported template construct '" + kw + "' (chat templates are self-contained)");
        fail_here("encountered unknown tag '" + kw + "'");
    }

    NodePtr parse_if() {
        auto n = node(NodeKind::If, next());
        while (true) {
            n->args.push_back(parse_tuple(false, false, {}, false));
            n->bodies.push_back(statements({"elif", "else", "endif"}));
            std::string tag = next().text;
            if (tag == "elif") continue;
            if (tag == "else") {
                n->else_body = statements({"endif"});
                next();
            }
            break;
        }
        expect_block_end();
        return n;
    }

    NodePtr parse_for() {
        auto n = node(NodeKind::For, next());
        n->a = parse_assign_target(true, false, {"in"});
        expect_name("in");
        n->b = parse_tuple(false, false, {"recursive"}, false);
        if (skip_name("if")) n->c = parse_expression(true);
        if (skip_name("recursive")) fail_here("recursive loops are not supported");
        ++loop_depth_;
        n->body = statements({"endfor", "else"});
        --loop_depth_;
        n->uses_loop = mentions(n->body, "loop") || mentions(n->c.get(), "loop");
        if (next().text == "else") {
            n->else_body = statements({"endfor"});
            next();
        }
        expect_block_end();
        return n;
    }

    NodePtr parse_set() {
        const Token& t = next();
        auto target = parse_assign_target(true, true, {});
        if (skip_op("=")) {
            auto n = node(NodeKind::Set, t);
            n->a = std::move(target);
            n->b = parse_tuple(false, true, {}, false);
            expect_block_end();
            return n;
        }
        auto n = node(NodeKind::SetBlock, t);
        n->a = std::move(target);
        n->c = parse_filter(nullptr, false);
        n->body = statements({"endset"});
        next();
        expect_block_end();
        return n;
    }

    void parse_signature(Node& n) {
        expect_op("(");
        size_t defaults = 0;
        while (!is_op(")")) {
            if (!n.params.empty()) expect_op(",");
            n.params.push_back(expect_name().text);
            if (skip_op("=")) {
                n.args.push_back(parse_expression(true));
                ++defaults;
            } else if (defaults) {
                fail_here("non-default argument follows default argument");
            }
        }
        expect_op(")");
    }

    // Loop controls never cross a macro or call-block body (jinja compiles those to separate functions).
    Body function_body(const std::set<std::string>& ends) {
        int saved = loop_depth_;
        loop_depth_ = 0;
        Body b = statements(ends);
        loop_depth_ = saved;
        next();
        expect_block_end();
        return b;
    }

    static bool mentions(const Body& body, const std::string& name);
    static bool mentions(const Node* n, const std::string& name) {
        if (!n) return false;
        if (n->kind == NodeKind::Name && n->name == name) return true;
        if (mentions(n->a.get(), name) || mentions(n->b.get(), name) || mentions(n->c.get(), name)) return true;
        for (const auto& x : n->args)
            if (mentions(x.get(), name)) return true;
        for (const auto& [k, x] : n->kwargs)
            if (mentions(x.get(), name)) return true;
        for (const auto& b : n->bodies)
            if (mentions(b, name)) return true;
        return mentions(n->body, name) || mentions(n->else_body, name);
    }

    NodePtr parse_macro() {
        auto n = node(NodeKind::Macro, next());
        n->name = expect_name().text;
        parse_signature(*n);
        n->body = function_body({"endmacro"});
        n->uses_caller = mentions(n->body, "caller");
        n->uses_varargs = mentions(n->body, "varargs");
        n->uses_kwargs = mentions(n->body, "kwargs");
        return n;
    }

    NodePtr parse_call_block() {
        auto n = node(NodeKind::CallBlock, next());
        if (is_op("(")) parse_signature(*n);
        n->a = parse_expression(true);
        if (n->a->kind != NodeKind::Call) fail_here("expected call");
        n->body = function_body({"endcall"});
        return n;
    }

    NodePtr parse_filter_block() {
        auto n = node(NodeKind::FilterBlock, next());
        n->c = parse_filter(nullptr, true);
        n->body = statements({"endfilter"});
        next();
        expect_block_end();
        return n;
    }

    NodePtr parse_with() {
        auto n = node(NodeKind::With, next());
        while (cur().type != Tok::BlockEnd) {
            if (!n->params.empty()) expect_op(",");
            n->params.push_back(expect_name().text);
            expect_op("=");
            n->args.push_back(parse_expression(true));
        }
        n->body = statements({"endwith"});
        next();
        expect_block_end();
        return n;
    }

    NodePtr parse_assign_target(bool with_tuple, bool with_namespace, const std::set<std::string>& extra_end) {
        const Token& t = cur();
        NodePtr target = with_tuple ? parse_tuple(true, true, extra_end, false, with_namespace)
                                    : parse_primary(with_namespace);
        auto assignable = [](const Node& x) { return x.kind == NodeKind::Name || x.kind == NodeKind::NSRef; };
        bool ok = assignable(*target);
        if (target->kind == NodeKind::TupleLit) {
            ok = true;
            for (const auto& x : target->args) ok = ok && x->kind == NodeKind::Name;
        }
        if (!ok) fail_at(t, "can't assign to this target");
        return target;
    }

    // ---- expressions ------------------------------------------------------------------------------------

    bool is_tuple_end(const std::set<std::string>& extra_end) const {
        const Token& t = cur();
        if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof) return true;
        if (t.type == Tok::Op && t.text == ")") return true;
        return t.type == Tok::Name && extra_end.count(t.text);
    }

    NodePtr parse_tuple(bool simplified, bool with_condexpr, const std::set<std::string>& extra_end,
                        bool explicit_parens, bool with_namespace = false) {
        const Token& start = cur();
        std::vector<NodePtr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            if (is_tuple_end(extra_end)) break;
            items.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
            if (is_op(",")) is_tuple = true;
            else break;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parens) fail_here("expected an expression, got '" + describe(cur()) + "'");
        }
        auto n = node(NodeKind::TupleLit, start);
        n->args = std::move(items);
        return n;
    }

    NodePtr parse_expression(bool with_condexpr) {
        DepthGuard g(*this);
        return with_condexpr ? parse_condexpr() : parse_or();
    }

    NodePtr parse_condexpr() {
        NodePtr e1 = parse_or();
        while (is_name("if")) {
            const Token& t = next();
            auto n = node(NodeKind::CondExpr, t);
            n->a = parse_or();
            n->b = std::move(e1);
            if (skip_name("else")) n->c = parse_condexpr();
            e1 = std::move(n);
        }
        return e1;
    }

    NodePtr binop(const Token& t, const std::string& op, NodePtr l, NodePtr r) {
        auto n = node(NodeKind::BinOp, t);
        n->name = op;
        n->a = std::move(l);
        n->b = std::move(r);
        return n;
    }

    NodePtr parse_or() {
        NodePtr l = parse_and();
        while (is_name("or")) {
            const Token& t = next();
            l = binop(t, "or", std::move(l), parse_and());
        }
        return l;
    }

    NodePtr parse_and() {
        NodePtr l = parse_not();
        while (is_name("and")) {
            const Token& t = next();
            l = binop(t, "and", std::move(l), parse_not());
        }
        return l;
    }

    NodePtr parse_not() {
        if (is_name("not")) {
            DepthGuard g(*this);
            auto n = node(NodeKind::Not, next());
            n->a = parse_not();
            return n;
        }
        return parse_compare();
    }

    NodePtr parse_compare() {
        const Token& start = cur();
        NodePtr e = parse_math1();
        NodePtr cmp;
        while (true) {
            std::string op;
            if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                          cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
                op = next().text;
            } else if (is_name("in")) {
                next();
                op = "in";
            } else if (is_name("not") && is_name("in", 1)) {
                next();
                next();
                op = "notin";
            } else {
                break;
            }
            if (!cmp) {
                cmp = node(NodeKind::Compare, start);
                cmp->a = std::move(e);
            }
            cmp->ops.push_back(op);
            cmp->args.push_back(parse_math1());
        }
        return cmp ? std::move(cmp) : std::move(e);
    }

    NodePtr parse_math1() {
        NodePtr l = parse_concat();
        while (is_op("+") || is_op("-")) {
            const Token& t = next();
            l = binop(t, t.text, std::move(l), parse_concat());
        }
        return l;
    }

    NodePtr parse_concat() {
        NodePtr l = parse_math2();
        while (is_op("~")) {
            const Token& t = next();
            l = binop(t, "~", std::move(l), parse_math2());
        }
        return l;
    }

    NodePtr parse_math2() {
        NodePtr l = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const Token& t = next();
            l = binop(t, t.text, std::move(l), parse_pow());
        }
        return l;
    }

    NodePtr parse_pow() {
        NodePtr l = parse_unary(true);
        while (is_op("**")) {
            const Token& t = next();
            l = binop(t, "**", std::move(l), parse_unary(true));
        }
        return l;
    }

    NodePtr parse_unary(bool with_filter) {
        DepthGuard g(*this);
        NodePtr n;
        if (is_op("-") || is_op("+")) {
            const Token& t = next();
            n = node(t.text == "-" ? NodeKind::Neg : NodeKind::Pos, t);
            n->a = parse_unary(false);
        } else {
            n = parse_primary(false);
        }
        n = parse_postfix(std::move(n));
        if (with_filter) n = parse_filter_expr(std::move(n));
        return n;
    }

    NodePtr parse_primary(bool with_namespace) {
        DepthGuard g(*this);
        const Token& t = cur();
        if (t.type == Tok::Name) {
            next();
            if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
                auto n = node(NodeKind::Const, t);
                n->value = Value::boolean(t.text == "true" || t.text == "True");
                return n;
            }
            if (t.text == "none" || t.text == "None") {
                auto n = node(NodeKind::Const, t);
                n->value = Value::none();
                return n;
            }
            if (with_namespace && is_op(".")) {
                next();
                auto n = node(NodeKind::NSRef, t);
                n->name = t.text;
                n->attr = expect_name().text;
                return n;
            }
            auto n = node(NodeKind::Name, t);
            n->name = t.text;
            return n;
        }
        if (t.type == Tok::String) {
            std::string s;
            while (cur().type == Tok::String) s += next().text;
            auto n = node(NodeKind::Const, t);
            n->value = Value::string(std::move(s));
            return n;
        }
        if (t.type == Tok::Int || t.type == Tok::Float) {
            next();
            auto n = node(NodeKind::Const, t);
            n->value = t.type == Tok::Int ? Value::integer(t.ival) : Value::number(t.fval);
            return n;
        }
        if (is_op("(")) {
            next();
            auto n = parse_tuple(false, true, {}, true);
            expect_op(")");
            return n;
        }
        if (is_op("[")) {
            auto n = node(NodeKind::ListLit, next());
            while (!is_op("]")) {
                if (!n->args.empty()) expect_op(",");
                if (is_op("]")) break;
                n->args.push_back(parse_expression(true));
            }
            expect_op("]");
            return n;
        }
        if (is_op("{")) {
            auto n = node(NodeKind::DictLit, next());
            while (!is_op("}")) {
                if (!n->args.empty()) expect_op(",");
                if (is_op("}")) break;
                n->args.push_back(parse_expression(true));
                expect_op(":");
                n->args.push_back(parse_expression(true));
            }
            expect_op("}");
            return n;
        }
        fail_here("unexpected '" + describe(t) + "'");
    }

    NodePtr parse_postfix(NodePtr n) {
        while (true) {
            if (is_op(".") || is_op("[")) {
                n = parse_subscript(std::move(n));
            } else if (is_op("(")) {
                n = parse_call(std::move(n));
            } else {
                return n;
            }
        }
    }

    NodePtr parse_filter_expr(NodePtr n) {
        while (true) {
            if (is_op("|")) {
                n = parse_filter(std::move(n), false);
            } else if (is_name("is")) {
                n = parse_test(std::move(n));
            } else if (is_op("(")) {
                n = parse_call(std::move(n));
            } else {
                return n;
            }
        }
    }

    NodePtr parse_subscript(NodePtr obj) {
        DepthGuard g(*this);
        const Token& t = next();
        if (t.text == ".") {
            const Token& a = next();
            if (a.type == Tok::Name) {
                auto n = node(NodeKind::Getattr, t);
                n->a = std::move(obj);
                n->name = a.text;
                return n;
            }
            if (a.type != Tok::Int) fail_at(a, "expected name or number");
            auto n = node(NodeKind::Getitem, t);
            n->a = std::move(obj);
            n->b = node(NodeKind::Const, a);
            n->b->value = Value::integer(a.ival);
            return n;
        }
        std::vector<NodePtr> items;
        while (!is_op("]")) {
            if (!items.empty()) expect_op(",");
            items.push_back(parse_subscribed());
        }
        expect_op("]");
        auto n = node(NodeKind::Getitem, t);
        n->a = std::move(obj);
        if (items.size() == 1) {
            n->b = std::move(items[0]);
        } else {
            n->b = node(NodeKind::TupleLit, t);
            n->b->args = std::move(items);
        }
        return n;
    }

    NodePtr parse_subscribed() {
        const Token& t = cur();
        NodePtr first;
        if (!is_op(":")) {
            first = parse_expression(true);
            if (!is_op(":")) return first;
        }
        next();  // ':'
        auto n = node(NodeKind::Slice, t);
        n->a = std::move(first);
        if (!is_op(":") && !is_op("]") && !is_op(",")) n->b = parse_expression(true);
        if (skip_op(":")) {
            if (!is_op("]") && !is_op(",")) n->c = parse_expression(true);
        }
        return n;
    }

    void parse_call_args(Node& n) {
        expect_op("(");
        bool require_comma = false;
        while (!is_op(")")) {
            if (require_comma) {
                expect_op(",");
                if (is_op(")")) break;
            }
            if (is_op("*")) {  // *args: spliced into the positional arguments at call time
                if (n.b || n.c) fail_here("invalid syntax for function call expression");
                next();
                n.b = parse_expression(true);
            } else if (is_op("**")) {  // **kwargs
                if (n.c) fail_here("invalid syntax for function call expression");
                next();
                n.c = parse_expression(true);
            } else if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
                if (n.c) fail_here("invalid syntax for function call expression");
                std::string key = next().text;
                next();
                n.kwargs.emplace_back(key, parse_expression(true));
            } else {
                if (!n.kwargs.empty() || n.b || n.c) fail_here("invalid syntax for function call expression");
                n.args.push_back(parse_expression(true));
            }
            require_comma = true;
        }
        expect_op(")");
    }

    NodePtr parse_call(NodePtr callee) {
        auto n = node(NodeKind::Call, cur());
        n->a = std::move(callee);
        parse_call_args(*n);
        return n;
    }

    NodePtr parse_filter(NodePtr n, bool start_inline) {
        while (is_op("|") || start_inline) {
            if (!start_inline) next();
            const Token& t = expect_name();
            std::string name = t.text;
            if (is_op(".")) fail_here("dotted filter names are not supported");
            if (!has_filter(name)) fail_at(t, "no filter named '" + name + "'");
            auto f = node(NodeKind::Filter, t);
            f->name = name;
            f->a = std::move(n);
            if (is_op("(")) parse_call_args(*f);
            n = std::move(f);
            start_inline = false;
        }
        return n;
    }

    NodePtr parse_test(NodePtr obj) {
        const Token& t = next();  // 'is'
        bool negated = skip_name("not");
        const Token& nt = expect_name();
        std::string name = nt.text;
        if (is_op(".")) fail_here("dotted test names are not supported");
        if (!has_test(name)) fail_at(nt, "no test named '" + name + "'");
        auto n = node(NodeKind::Test, t);
        n->name = name;
        n->a = std::move(obj);
        const Token& c = cur();
        if (is_op("(")) {
            parse_call_args(*n);
        } else if ((c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Int || c.type == Tok::Float ||
                    is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) fail_here("you cannot chain multiple tests with is");
            n->args.push_back(parse_postfix(parse_primary(false)));
        }
        if (!negated) return n;
        auto neg = node(NodeKind::Not, t);
        neg->a = std::move(n);
        return neg;
    }
};

bool Parser::mentions(const Body& body, const std::string& name) {
    for (const auto& n : body)
        if (mentions(n.get(), name)) return true;
    return false;
}

}  // namespace

std::unique_ptr<Template> parse(const std::string& source) { return Parser(tokenize(source)).run(); }

}  // namespace grimoire::jinja
