#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "tokenizer/utf8.h"

namespace grimoire {

namespace {

bool is_ascii(unsigned char c) { return c < 0x80; }

// Unicode normalization of `in` into `out`. ASCII characters are starters that never compose with what precedes
// them, so the text can be cut before every ASCII byte and each cut normalized alone: only the runs of
// non-ASCII characters (with the ASCII starter just before them) go through utf8proc. English text is then
// nearly a copy. A run that is not valid UTF-8 is kept as is.
void unicode_normalize(std::string_view in, utf8proc_option_t opts, std::string& out) {
    out.clear();
    out.reserve(in.size());
    size_t i = 0;
    while (i < in.size()) {
        size_t j = i;
        while (j < in.size() && is_ascii(static_cast<unsigned char>(in[j]))) ++j;
        if (j == in.size()) {
            out.append(in.data() + i, j - i);
            break;
        }
        // in[j] starts a non-ASCII run; its starter (one ASCII byte before it) joins the run.
        const size_t run_start = j > i ? j - 1 : j;
        out.append(in.data() + i, run_start - i);
        size_t k = j;
        while (k < in.size() && !is_ascii(static_cast<unsigned char>(in[k]))) ++k;
        utf8proc_uint8_t* dst = nullptr;
        const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data() + run_start),
                                    static_cast<utf8proc_ssize_t>(k - run_start), &dst, opts);
        if (n >= 0) {
            out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
        } else {
            out.append(in.data() + run_start, k - run_start);
        }
        std::free(dst);
        i = k;
    }
}

void replace_all(std::string_view in, const std::string& from, const std::string& to, std::string& out) {
    out.clear();
    size_t i = 0;
    while (true) {
        const size_t p = from.empty() ? std::string_view::npos : in.find(from, i);
        if (p == std::string_view::npos) break;
        out.append(in.data() + i, p - i);
        out += to;
        i = p + from.size();
    }
    out.append(in.data() + i, in.size() - i);
}

void lowercase(std::string_view in, std::string& out) {
    out.clear();
    for (size_t i = 0; i < in.size();) {
        const size_t start = i;
        const uint32_t cp = utf8::next(in, i);
        if (cp >= 0xDC00 && cp <= 0xDCFF && i - start == 1 && static_cast<unsigned char>(in[start]) >= 0x80) {
            out.push_back(in[start]);  // invalid byte: keep it
        } else {
            utf8::append(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
        }
    }
}

void strip(std::string_view in, bool left, bool right, std::string& out) {
    size_t b = 0, e = in.size();
    while (left && b < e) {
        size_t i = b;
        if (!utf8::is_space(utf8::next(in, i))) break;
        b = i;
    }
    while (right && e > b) {
        size_t s = e - 1;  // back up to the start of the last character
        while (s > b && (static_cast<unsigned char>(in[s]) & 0xC0) == 0x80) --s;
        size_t i = s;
        if (!utf8::is_space(utf8::next(in, i))) break;
        e = s;
    }
    out.assign(in.substr(b, e - b));
}

}  // namespace

std::string_view Normalizer::apply(std::string_view in, std::string& scratch) const {
    std::string_view cur = in;
    std::string tmp;
    for (const Step& s : steps_) {
        switch (s.kind) {
            case Kind::NFC: unicode_normalize(cur, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE), tmp); break;
            case Kind::NFD: unicode_normalize(cur, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE), tmp); break;
            case Kind::NFKC:
                unicode_normalize(cur, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT), tmp);
                break;
            case Kind::NFKD:
                unicode_normalize(cur, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT),
                                  tmp);
                break;
            case Kind::Prepend:
                // As in `tokenizers`: an empty segment stays empty.
                if (cur.empty()) continue;
                tmp = s.a;
                tmp += cur;
                break;
            case Kind::Replace: replace_all(cur, s.a, s.b, tmp); break;
            case Kind::Lowercase: lowercase(cur, tmp); break;
            case Kind::Strip: strip(cur, s.left, s.right, tmp); break;
        }
        if (tmp == cur) continue;
        scratch.swap(tmp);
        cur = scratch;
    }
    return cur;
}

}  // namespace grimoire
