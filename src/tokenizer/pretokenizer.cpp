#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace grimoire {

const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// Per-thread match context with a JIT stack large enough for long whitespace or letter runs.
struct MatchContext {
    pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    MatchContext() { pcre2_jit_stack_assign(ctx, nullptr, stack); }
    ~MatchContext() {
        pcre2_jit_stack_free(stack);
        pcre2_match_context_free(ctx);
    }
};

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) {
    int err = 0;
    PCRE2_SIZE off = 0;
    auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                               PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        throw Error(where + ": regex " + pattern + " does not compile at offset " + std::to_string(off) + ": " +
                    reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: without JIT the interpreter is used
    code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& f) const {
    thread_local MatchContext mc;
    auto* code = static_cast<pcre2_code*>(code_);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t off = 0;
    while (off < text.size()) {
        const int rc = pcre2_match(code, subject, text.size(), off, 0, md, mc.ctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            pcre2_match_data_free(md);
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            throw Error(std::string("tokenizer: pre-tokenizer regex failed: ") + reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        if (ov[1] == ov[0]) {  // empty match: step over one character
            size_t i = ov[0];
            utf8::next(text, i);
            off = i;
            continue;
        }
        f(ov[0], ov[1]);
        off = ov[1];
    }
    pcre2_match_data_free(md);
}

namespace {

struct Span {
    size_t b, e;
    bool match;
};

// Cuts `piece` at the delimiters found by the step and keeps them as `behavior` says (`tokenizers` semantics).
void split_piece(const PreTokenizer::Step& st, std::string_view piece, std::vector<std::string_view>& out) {
    std::vector<Span> spans;
    size_t prev = 0;
    auto on_match = [&](size_t b, size_t e) {
        if (b > prev) spans.push_back({prev, b, false});
        spans.push_back({b, e, true});
        prev = e;
    };
    if (st.regex) {
        st.regex->for_each_match(piece, on_match);
    } else if (!st.literal.empty()) {
        for (size_t p = piece.find(st.literal); p != std::string_view::npos; p = piece.find(st.literal, prev))
            on_match(p, p + st.literal.size());
    }
    if (prev < piece.size()) spans.push_back({prev, piece.size(), false});
    if (st.invert)
        for (Span& s : spans) s.match = !s.match;

    using B = PreTokenizer::Behavior;
    std::vector<Span> kept;
    switch (st.behavior) {
        case B::Isolated: kept = std::move(spans); break;
        case B::Removed:
            for (const Span& s : spans)
                if (!s.match) kept.push_back(s);
            break;
        case B::Contiguous: {
            bool prev_match = false;
            for (const Span& s : spans) {
                if (s.match && prev_match) kept.back().e = s.e;
                else kept.push_back(s);
                prev_match = s.match;
            }
            break;
        }
        case B::MergedWithPrevious: {
            bool prev_match = false;
            for (const Span& s : spans) {
                if (s.match && !prev_match && !kept.empty()) kept.back().e = s.e;
                else kept.push_back(s);
                prev_match = s.match;
            }
            break;
        }
        case B::MergedWithNext: {
            bool next_match = false;  // walking backwards: was the span after this one a delimiter?
            for (size_t k = spans.size(); k-- > 0;) {
                const Span& s = spans[k];
                if (s.match && !next_match && !kept.empty()) kept.back().b = s.b;
                else kept.push_back(s);
                next_match = s.match;
            }
            std::reverse(kept.begin(), kept.end());
            break;
        }
    }
    for (const Span& s : kept) out.push_back(piece.substr(s.b, s.e - s.b));
}

}  // namespace

void PreTokenizer::run(std::string_view text, bool at_origin, std::vector<std::string_view>& words,
                       std::deque<std::string>& arena) const {
    if (text.empty()) return;
    if (steps_.empty()) {
        words.push_back(text);
        return;
    }
    std::vector<std::string_view> cur{text}, next;
    for (size_t si = 0; si < steps_.size(); ++si) {
        const Step& st = steps_[si];
        // The last step writes straight into `words`, saving a copy of the (long) list.
        std::vector<std::string_view>& dst = si + 1 == steps_.size() ? words : next;
        for (size_t pi = 0; pi < cur.size(); ++pi) {
            std::string_view piece = cur[pi];
            switch (st.kind) {
                case Step::Kind::Split: split_piece(st, piece, dst); break;
                case Step::Kind::ByteLevel:
                    if (st.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
                        std::string& s = arena.emplace_back(1, ' ');
                        s.append(piece);
                        piece = s;
                    }
                    if (st.regex) {
                        Step iso;
                        iso.kind = Step::Kind::Split;
                        iso.regex = st.regex;
                        split_piece(iso, piece, dst);
                    } else {
                        dst.push_back(piece);
                    }
                    break;
                case Step::Kind::Metaspace: {
                    std::string s;
                    for (char c : piece) {
                        if (c == ' ') s += st.replacement;
                        else s.push_back(c);
                    }
                    const bool origin = at_origin && pi == 0;
                    const bool starts = s.compare(0, st.replacement.size(), st.replacement) == 0;
                    if (!starts && (st.prepend == Prepend::Always || (st.prepend == Prepend::First && origin)))
                        s.insert(0, st.replacement);
                    arena.push_back(std::move(s));
                    if (st.split) {
                        Step mwn;
                        mwn.kind = Step::Kind::Split;
                        mwn.literal = st.replacement;
                        mwn.behavior = Behavior::MergedWithNext;
                        split_piece(mwn, arena.back(), dst);
                    } else {
                        dst.push_back(arena.back());
                    }
                    break;
                }
            }
        }
        if (&dst == &next) {
            cur.swap(next);
            next.clear();
        }
    }
}

}  // namespace grimoire
