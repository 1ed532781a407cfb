#include "tokenizer/jinja/lexer.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "tokenizer/jinja/pystr.h"

namespace grimoire::jinja {

namespace {

// Python's `\s` on str: Unicode whitespace.
size_t space_len(const std::string& s, size_t i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) return (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) ? 1 : 0;
    auto u = pystr::decode(s.substr(i, 4));
    if (u.empty() || !pystr::is_space(u[0])) return 0;
    std::string one;
    pystr::append_utf8(one, u[0]);
    return one.size();
}

std::string rstrip_ws(const std::string& s) { return pystr::strip(s, std::nullopt, false, true); }

bool all_space(const std::string& s, size_t from) {
    if (from >= s.size()) return false;  // `\s+` needs at least one character
    for (size_t i = from; i < s.size();) {
        size_t n = space_len(s, i);
        if (!n) return false;
        i += n;
    }
    return true;
}

class Lexer {
public:
    explicit Lexer(std::string src) : s_(std::move(src)) {}

    std::vector<Token> run() {
        while (pos_ < s_.size()) root_step();
        push(Tok::Eof, "");
        return std::move(out_);
    }

private:
    std::string s_;
    size_t pos_ = 0;
    bool line_starting_ = true;
    std::vector<Token> out_;

    [[noreturn]] void error(const std::string& msg, size_t at) const {
        int line = 1, col = 1;
        for (size_t i = 0; i < at && i < s_.size(); ++i) {
            if (s_[i] == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        throw Error("template:" + std::to_string(line) + ":" + std::to_string(col) + ": " + msg);
    }

    void push(Tok t, std::string text, size_t at = std::string::npos) {
        Token tok;
        tok.type = t;
        tok.text = std::move(text);
        size_t p = at == std::string::npos ? pos_ : at;
        // line/col are computed lazily from the position of the previous token to keep this linear
        tok.line = 1;
        tok.col = static_cast<int>(p);
        out_.push_back(std::move(tok));
    }

    void skip_ws() {
        while (pos_ < s_.size()) {
            size_t n = space_len(s_, pos_);
            if (!n) break;
            pos_ += n;
        }
    }

    bool at(const char* lit, size_t p) const { return s_.compare(p, std::strlen(lit), lit) == 0; }

    // Applies `-` / lstrip_blocks to the data before a tag and emits it.
    void emit_data(std::string text, char sign, bool is_variable, size_t at_pos) {
        if (sign == '-') {
            text = rstrip_ws(text);
        } else if (sign != '+' && !is_variable) {
            size_t l_pos = text.rfind('\n');
            l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
            if ((l_pos > 0 || line_starting_) && all_space(text, l_pos)) text.resize(l_pos);
        }
        if (!text.empty()) push(Tok::Data, std::move(text), at_pos);
    }

    // Matches `{%(-|+|)\s*raw\s*(-%}\s*|%})` at p; returns the end of the match or npos.
    size_t match_raw_begin(size_t p) const {
        size_t q = p + 2;
        if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) ++q;
        while (q < s_.size() && space_len(s_, q)) q += space_len(s_, q);
        if (!at("raw", q)) return std::string::npos;
        q += 3;
        while (q < s_.size() && space_len(s_, q)) q += space_len(s_, q);
        if (at("-%}", q)) {
            q += 3;
            while (q < s_.size() && space_len(s_, q)) q += space_len(s_, q);
            return q;
        }
        if (at("%}", q)) return q + 2;
        return std::string::npos;
    }

    // After a block/comment end tag: `-` strips all following whitespace, `+` nothing, plain drops one newline.
    void after_end(char sign) {
        if (sign == '-')
            skip_ws();
        else if (sign != '+' && pos_ < s_.size() && s_[pos_] == '\n')
            ++pos_;
        line_starting_ = pos_ > 0 && s_[pos_ - 1] == '\n';
    }

    void root_step() {
        size_t p = pos_;
        size_t tag = std::string::npos;
        while (true) {
            tag = s_.find('{', p);
            if (tag == std::string::npos || tag + 1 >= s_.size()) break;
            char c = s_[tag + 1];
            if (c == '{' || c == '%' || c == '#') break;
            p = tag + 1;
        }
        if (tag == std::string::npos || tag + 1 >= s_.size()) {
            push(Tok::Data, s_.substr(pos_));
            pos_ = s_.size();
            return;
        }
        char kind = s_[tag + 1];
        char sign = tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : 0;
        std::string text = s_.substr(pos_, tag - pos_);
        size_t text_pos = pos_;
        if (kind == '%') {
            size_t raw_end = match_raw_begin(tag);
            if (raw_end != std::string::npos) {
                emit_data(std::move(text), sign, false, text_pos);
                pos_ = raw_end;
                line_starting_ = s_[pos_ - 1] == '\n';
                lex_raw();
                return;
            }
        }
        emit_data(std::move(text), sign, kind == '{', text_pos);
        pos_ = tag + 2 + (sign ? 1 : 0);
        line_starting_ = false;
        if (kind == '#')
            lex_comment(tag);
        else
            lex_tag(kind == '%', tag);
    }

    void lex_raw() {
        // (.*?)({%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?)) with the optional lstrip on the raw text.
        size_t p = pos_;
        while (true) {
            size_t tag = s_.find("{%", p);
            if (tag == std::string::npos) error("missing end of raw directive", pos_);
            size_t q = tag + 2;
            char sign = 0;
            if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) sign = s_[q++];
            while (q < s_.size() && space_len(s_, q)) q += space_len(s_, q);
            if (!at("endraw", q)) {
                p = tag + 1;
                continue;
            }
            q += 6;
            while (q < s_.size() && space_len(s_, q)) q += space_len(s_, q);
            char end_sign = 0;
            if (at("+%}", q) || at("-%}", q)) end_sign = s_[q++];
            if (!at("%}", q)) {
                p = tag + 1;
                continue;
            }
            emit_data(s_.substr(pos_, tag - pos_), sign, false, pos_);
            pos_ = q + 2;
            after_end(end_sign);
            return;
        }
    }

    void lex_comment(size_t start) {
        size_t e = s_.find("#}", pos_);
        if (e == std::string::npos) error("missing end of comment tag", start);
        char sign = 0;
        if (e > pos_ && (s_[e - 1] == '-' || s_[e - 1] == '+')) sign = s_[e - 1];
        pos_ = e + 2;
        after_end(sign);
    }

    void lex_tag(bool block, size_t start) {
        push(block ? Tok::BlockBegin : Tok::VarBegin, "", start);
        std::vector<char> balance;
        while (true) {
            if (pos_ >= s_.size()) error("unexpected end of template, expected end of tag", start);
            if (balance.empty()) {
                if (block) {
                    if (at("+%}", pos_) || at("-%}", pos_) || at("%}", pos_)) {
                        char sign = s_[pos_] == '%' ? 0 : s_[pos_];
                        push(Tok::BlockEnd, "");
                        pos_ += sign ? 3 : 2;
                        after_end(sign);
                        return;
                    }
                } else if (at("-}}", pos_) || at("}}", pos_)) {
                    bool minus = s_[pos_] == '-';
                    push(Tok::VarEnd, "");
                    pos_ += minus ? 3 : 2;
                    if (minus) skip_ws();
                    line_starting_ = pos_ > 0 && s_[pos_ - 1] == '\n';
                    return;
                }
            }
            if (size_t n = space_len(s_, pos_)) {
                pos_ += n;
                continue;
            }
            lex_token(balance);
        }
    }

    static bool is_digit(char c) { return c >= '0' && c <= '9'; }
    static bool is_name_start(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || static_cast<unsigned char>(c) >= 0x80;
    }

    // Digits with single underscores between them: (\d+_)*\d+ ; returns the end or npos.
    size_t digits(size_t p) const {
        if (p >= s_.size() || !is_digit(s_[p])) return std::string::npos;
        while (true) {
            while (p < s_.size() && is_digit(s_[p])) ++p;
            if (p + 1 < s_.size() && s_[p] == '_' && is_digit(s_[p + 1])) {
                ++p;
                continue;
            }
            return p;
        }
    }

    static std::string no_underscores(std::string t) {
        std::erase(t, '_');
        return t;
    }

    bool lex_number() {
        size_t p = pos_;
        size_t int_end = digits(p);
        if (int_end == std::string::npos) return false;
        // float: digits ((.digits)? e[+-]?digits | .digits), not right after a '.'
        bool after_dot = p > 0 && s_[p - 1] == '.';
        if (!after_dot) {
            size_t q = int_end;
            size_t frac_end = std::string::npos;
            if (q < s_.size() && s_[q] == '.') frac_end = digits(q + 1);
            size_t e = frac_end != std::string::npos ? frac_end : q;
            size_t exp_end = std::string::npos;
            if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
                size_t r = e + 1;
                if (r < s_.size() && (s_[r] == '+' || s_[r] == '-')) ++r;
                exp_end = digits(r);
            }
            size_t end = exp_end != std::string::npos ? exp_end : frac_end;
            if (end != std::string::npos) {
                std::string t = no_underscores(s_.substr(p, end - p));
                push(Tok::Float, t);
                out_.back().fval = std::strtod(t.c_str(), nullptr);
                pos_ = end;
                return true;
            }
        }
        // integers: 0b / 0o / 0x prefixes, decimal without leading zeros, or zeros
        int base = 10;
        size_t q = p;
        if (s_[p] == '0' && p + 1 < s_.size()) {
            char x = static_cast<char>(s_[p + 1] | 0x20);
            if (x == 'b' || x == 'o' || x == 'x') {
                base = x == 'b' ? 2 : (x == 'o' ? 8 : 16);
                q = p + 2;
                auto ok = [&](char c) {
                    c = static_cast<char>(c | 0x20);
                    return base == 16 ? (is_digit(c) || (c >= 'a' && c <= 'f')) : (c >= '0' && c < '0' + base);
                };
                size_t r = q;
                while (r < s_.size() && (ok(s_[r]) || (s_[r] == '_' && r + 1 < s_.size() && ok(s_[r + 1])))) ++r;
                if (r == q) base = 10;
                else q = r;
            }
        }
        if (base == 10) {
            if (s_[p] == '0') {
                q = p + 1;
                while (q + 1 < s_.size() && (s_[q] == '0' || (s_[q] == '_' && s_[q + 1] == '0'))) ++q;
                if (q < s_.size() && s_[q] == '0') ++q;
            } else {
                q = int_end;
            }
        }
        std::string t = no_underscores(s_.substr(p, q - p));
        errno = 0;
        unsigned long long v = std::strtoull(base == 10 ? t.c_str() : t.c_str() + 2, nullptr, base);
        if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) error("integer literal too large", p);
        push(Tok::Int, t);
        out_.back().ival = static_cast<int64_t>(v);
        pos_ = q;
        return true;
    }

    void lex_string() {
        char q = s_[pos_];
        size_t start = pos_;
        size_t p = pos_ + 1;
        std::string raw;
        while (true) {
            if (p >= s_.size()) error("unexpected char " + std::string(1, q), start);
            if (s_[p] == '\\' && p + 1 < s_.size()) {
                raw += s_[p];
                raw += s_[p + 1];
                p += 2;
                continue;
            }
            if (s_[p] == '\\') error("unterminated string", start);
            if (s_[p] == q) break;
            raw += s_[p++];
        }
        pos_ = p + 1;
        push(Tok::String, unescape(raw, start), start);
    }

    // Python's unicode-escape decoding (jinja2 decodes string literals that way).
    std::string unescape(const std::string& r, size_t at_pos) const {
        std::string out;
        for (size_t i = 0; i < r.size(); ++i) {
            if (r[i] != '\\' || i + 1 >= r.size()) {
                out += r[i];
                continue;
            }
            char c = r[++i];
            auto hex = [&](size_t n) {
                uint32_t v = 0;
                for (size_t k = 1; k <= n; ++k) {
                    if (i + k >= r.size()) error("truncated escape in string", at_pos);
                    char h = static_cast<char>(r[i + k] | 0x20);
                    if (!(is_digit(h) || (h >= 'a' && h <= 'f'))) error("truncated escape in string", at_pos);
                    v = v * 16 + static_cast<uint32_t>(is_digit(h) ? h - '0' : h - 'a' + 10);
                }
                i += n;
                if (v > 0x10FFFF) error("illegal Unicode character in string", at_pos);
                pystr::append_utf8(out, static_cast<char32_t>(v));
            };
            switch (c) {
            case '\n': break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case 'a': out += '\a'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'v': out += '\v'; break;
            case 'x': hex(2); break;
            case 'u': hex(4); break;
            case 'U': hex(8); break;
            case 'N': error("\\N{...} escapes are not supported", at_pos);
            default:
                if (c >= '0' && c <= '7') {
                    uint32_t v = 0;
                    size_t k = 0;
                    while (k < 3 && i < r.size() && r[i] >= '0' && r[i] <= '7') {
                        v = v * 8 + static_cast<uint32_t>(r[i] - '0');
                        ++i;
                        ++k;
                    }
                    --i;
                    pystr::append_utf8(out, static_cast<char32_t>(v));
                } else {
                    out += '\\';
                    out += c;
                }
            }
        }
        return out;
    }

    void lex_token(std::vector<char>& balance) {
        char c = s_[pos_];
        if (is_digit(c) && lex_number()) return;
        if (is_name_start(c)) {
            size_t p = pos_;
            while (p < s_.size() && (is_name_start(s_[p]) || is_digit(s_[p]))) ++p;
            push(Tok::Name, s_.substr(pos_, p - pos_));
            pos_ = p;
            return;
        }
        if (c == '\'' || c == '"') {
            lex_string();
            return;
        }
        static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
        for (const char* op : two) {
            if (at(op, pos_)) {
                push(Tok::Op, op);
                pos_ += 2;
                return;
            }
        }
        if (std::strchr("+-/*%~[](){}<>=.:|,;", c) && c != 0) {
            if (c == '(' || c == '[' || c == '{') balance.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
            if (c == ')' || c == ']' || c == '}') {
                if (balance.empty()) error(std::string("unexpected '") + c + "'", pos_);
                if (balance.back() != c)
                    error(std::string("unexpected '") + c + "', expected '" + balance.back() + "'", pos_);
                balance.pop_back();
            }
            push(Tok::Op, std::string(1, c));
            ++pos_;
            return;
        }
        error(std::string("unexpected char '") + c + "'", pos_);
    }
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
    // jinja2 normalises \r\n and \r to \n and drops one trailing newline (keep_trailing_newline=False).
    std::string s;
    s.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        if (source[i] == '\r') {
            s += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        } else {
            s += source[i];
        }
    }
    if (!s.empty() && s.back() == '\n') s.pop_back();
    auto toks = Lexer(s).run();
    // Convert byte offsets (stored in col) to line/column.
    int line = 1, col = 1;
    size_t p = 0;
    for (auto& t : toks) {
        size_t target = std::min(static_cast<size_t>(t.col), s.size());
        if (t.type == Tok::Eof) target = s.size();
        for (; p < target; ++p) {
            if (s[p] == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        t.line = line;
        t.col = col;
    }
    return toks;
}

}  // namespace grimoire::jinja
