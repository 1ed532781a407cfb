// Syntax tree of a parsed template. One node type with a kind tag keeps the parser and interpreter short; the
// comment on each kind says which fields it uses.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace grimoire::jinja {

enum class NodeKind {
    // expressions
    Const,     // value
    Name,      // name
    Getattr,   // a . name
    Getitem,   // a [ b ]
    Slice,     // a : b : c (each may be null)
    // Call / Filter / Test keep `*x` in b and `**y` in c (null when absent).
    Call,      // a ( args, kwargs )
    Filter,    // a | name ( args, kwargs ); a is null inside filter blocks / set blocks
    Test,      // a is name ( args, kwargs )
    Not,       // not a
    Neg,       // - a
    Pos,       // + a
    BinOp,     // a name b; name in + - * / // % ** ~ and or
    Compare,   // a then args[k] with ops[k] (== != < > <= >= in notin)
    CondExpr,  // b if a else c (c may be null)
    ListLit,   // args
    TupleLit,  // args
    DictLit,   // args as key/value pairs: args[2k], args[2k+1]
    NSRef,     // name . attr (assignment target)
    // statements
    Data,       // value (string)
    Print,      // a
    If,         // args = tests, bodies = bodies per test, else_body
    For,        // a = target, b = iterable, c = filter test (may be null), body, else_body, recursive
    Set,        // a = target, b = value
    SetBlock,   // a = target, c = filter chain (may be null), body
    Macro,      // name, params, args = defaults (aligned to the last params), body
    CallBlock,  // a = call expression, params/args = caller signature, body
    FilterBlock,  // c = filter chain, body
    With,       // params/args = names/values, body
    Break,
    Continue,
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
    NodeKind kind;
    int line = 0;
    int col = 0;
    std::string name;
    std::string attr;  // NSRef attribute
    Value value;
    NodePtr a, b, c;
    std::vector<NodePtr> args;
    std::vector<std::pair<std::string, NodePtr>> kwargs;
    std::vector<std::string> ops;     // Compare
    std::vector<std::string> params;  // Macro / CallBlock / With
    std::vector<Body> bodies;         // If
    Body body, else_body;
    bool uses_caller = false;   // Macro: body references `caller`
    bool uses_varargs = false;  // Macro: extra positional arguments are collected into `varargs`
    bool uses_kwargs = false;   // Macro: unknown keyword arguments are collected into `kwargs`
    bool uses_loop = true;      // For: the body or filter may read `loop` (else it is not built)
};

struct Template {
    Body body;
};

}  // namespace grimoire::jinja
