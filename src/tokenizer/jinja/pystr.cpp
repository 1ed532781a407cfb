#include "tokenizer/jinja/pystr.h"

#include <algorithm>
#include <stdexcept>

#include <utf8proc.h>

namespace grimoire::jinja::pystr {

static bool is_ascii(const std::string& s) {
    for (unsigned char c : s)
        if (c >= 0x80) return false;
    return true;
}

std::u32string decode(const std::string& s) {
    std::u32string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        utf8proc_int32_t cp = 0;
        auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                  static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
        if (n <= 0) {
            out.push_back(0xFFFD);
            i += 1;
        } else {
            out.push_back(static_cast<char32_t>(cp));
            i += static_cast<size_t>(n);
        }
    }
    return out;
}

void append_utf8(std::string& out, char32_t cp) {
    utf8proc_uint8_t buf[4];
    auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
    if (n <= 0) {  // surrogates and out-of-range points cannot be encoded; Python would keep them, we replace
        out += "\xEF\xBF\xBD";
        return;
    }
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string encode(const std::u32string& s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : s) append_utf8(out, c);
    return out;
}

size_t length(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s)
        if ((c & 0xC0) != 0x80) ++n;
    return n;
}

bool is_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

bool is_printable(char32_t c) {
    if (c == ' ') return true;
    if (c < 0x20 || c == 0x7F) return false;
    if (c < 0x7F) return true;
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
    }
}

static bool is_cased_upper(char32_t c) {
    return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_LU ||
           utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_LT;
}
static bool is_cased(char32_t c) {
    auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
static char32_t to_upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<int32_t>(c))); }
static char32_t to_lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<int32_t>(c))); }

std::string upper(const std::string& s) {
    if (is_ascii(s)) {
        std::string r = s;
        for (auto& c : r)
            if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
        return r;
    }
    auto u = decode(s);
    for (auto& c : u) c = to_upper(c);
    return encode(u);
}

std::string lower(const std::string& s) {
    if (is_ascii(s)) {
        std::string r = s;
        for (auto& c : r)
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
        return r;
    }
    auto u = decode(s);
    for (auto& c : u) c = to_lower(c);
    return encode(u);
}

std::string capitalize(const std::string& s) {
    auto u = decode(s);
    for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? to_upper(u[i]) : to_lower(u[i]);
    return encode(u);
}

std::string title_method(const std::string& s) {
    auto u = decode(s);
    bool prev_cased = false;
    for (auto& c : u) {
        bool cased = is_cased(c);
        c = prev_cased ? to_lower(c) : (cased ? to_upper(c) : c);
        prev_cased = cased || is_cased_upper(c);
    }
    return encode(u);
}

std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
    auto u = decode(s);
    std::u32string set;
    if (chars) set = decode(*chars);
    auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
    size_t b = 0, e = u.size();
    if (left)
        while (b < e && strip_it(u[b])) ++b;
    if (right)
        while (e > b && strip_it(u[e - 1])) --e;
    return encode(u.substr(b, e - b));
}

static void check_sep(const std::optional<std::string>& sep) {
    if (sep && sep->empty()) throw std::invalid_argument("empty separator");
}

std::vector<std::string> split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
    check_sep(sep);
    std::vector<std::string> out;
    if (sep) {
        size_t pos = 0;
        while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
            size_t hit = s.find(*sep, pos);
            if (hit == std::string::npos) break;
            out.push_back(s.substr(pos, hit - pos));
            pos = hit + sep->size();
        }
        out.push_back(s.substr(pos));
        return out;
    }
    auto u = decode(s);
    size_t i = 0, n = u.size();
    while (true) {
        while (i < n && is_space(u[i])) ++i;
        if (i >= n) break;
        if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {  // remainder kept as is
            out.push_back(encode(u.substr(i)));
            break;
        }
        size_t j = i;
        while (j < n && !is_space(u[j])) ++j;
        out.push_back(encode(u.substr(i, j - i)));
        i = j;
    }
    return out;
}

std::vector<std::string> rsplit(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
    check_sep(sep);
    std::vector<std::string> out;
    if (sep) {
        size_t end = s.size();
        while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
            if (end < sep->size()) break;
            size_t hit = s.rfind(*sep, end - sep->size());
            if (hit == std::string::npos) break;
            out.push_back(s.substr(hit + sep->size(), end - hit - sep->size()));
            end = hit;
        }
        out.push_back(s.substr(0, end));
        std::reverse(out.begin(), out.end());
        return out;
    }
    auto u = decode(s);
    size_t e = u.size();
    while (true) {
        while (e > 0 && is_space(u[e - 1])) --e;
        if (e == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
            out.push_back(encode(u.substr(0, e)));
            break;
        }
        size_t j = e;
        while (j > 0 && !is_space(u[j - 1])) --j;
        out.push_back(encode(u.substr(j, e - j)));
        e = j;
    }
    std::reverse(out.begin(), out.end());
    return out;
}

std::vector<std::string> splitlines(const std::string& s, bool keepends) {
    auto u = decode(s);
    std::vector<std::string> out;
    size_t i = 0, start = 0;
    auto is_break = [](char32_t c) {
        return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    };
    while (i < u.size()) {
        if (is_break(u[i])) {
            size_t eol = i;
            if (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
            ++i;
            out.push_back(encode(u.substr(start, (keepends ? i : eol) - start)));
            start = i;
        } else {
            ++i;
        }
    }
    if (start < u.size()) out.push_back(encode(u.substr(start)));
    return out;
}

std::string replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
    std::string out;
    if (old.empty()) {  // Python inserts `repl` before every code point and at the end
        auto u = decode(s);
        int64_t done = 0;
        for (char32_t c : u) {
            if (count < 0 || done < count) {
                out += repl;
                ++done;
            }
            append_utf8(out, c);
        }
        if (count < 0 || done < count) out += repl;
        return out;
    }
    size_t pos = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        size_t hit = s.find(old, pos);
        if (hit == std::string::npos) break;
        out.append(s, pos, hit - pos);
        out += repl;
        pos = hit + old.size();
        ++done;
    }
    out.append(s, pos, std::string::npos);
    return out;
}

int64_t find(const std::string& s, const std::string& sub, bool reverse) {
    size_t hit = reverse ? s.rfind(sub) : s.find(sub);
    if (hit == std::string::npos) return -1;
    return static_cast<int64_t>(length(s.substr(0, hit)));
}

int64_t count(const std::string& s, const std::string& sub) {
    if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
    return n;
}

std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step) {
    int64_t st = step.value_or(1);
    if (st == 0) throw std::invalid_argument("slice step cannot be zero");
    auto norm = [&](std::optional<int64_t> v, int64_t def, int64_t lo, int64_t hi) {
        if (!v) return def;
        int64_t x = *v < 0 ? *v + n : *v;
        return std::clamp(x, lo, hi);
    };
    std::vector<int64_t> idx;
    if (st > 0) {
        int64_t b = norm(start, 0, 0, n), e = norm(stop, n, 0, n);
        for (int64_t i = b; i < e; i += st) idx.push_back(i);
    } else {
        int64_t b = norm(start, n - 1, -1, n - 1), e = norm(stop, -1, -1, n - 1);
        for (int64_t i = b; i > e; i += st) idx.push_back(i);
    }
    return idx;
}

}  // namespace grimoire::jinja::pystr
