#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace grimoire {

namespace {

// Start of the character that ends just before byte position `end`.
size_t char_start_before(std::string_view s, size_t end) {
    size_t b = end - 1;
    while (b > 0 && end - b < 4 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    return b;
}

uint32_t char_before(std::string_view s, size_t end) {
    size_t b = char_start_before(s, end);
    return utf8::next(s, b);
}

bool is_word_char(uint32_t cp) {
    if (cp == '_') return true;
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
        case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
            return true;
        default:
            return false;
    }
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken& t) {
    if (t.content.empty()) return;
    int32_t n = 0;
    for (unsigned char c : t.content) {
        int32_t child = -1;
        for (auto [ch, idx] : nodes_[n].next)
            if (ch == c) child = idx;
        if (child < 0) {
            child = static_cast<int32_t>(nodes_.size());
            nodes_[n].next.emplace_back(c, child);
            nodes_.emplace_back();
        }
        n = child;
    }
    // A repeated content keeps the first id, like the reference implementation.
    if (nodes_[n].token < 0) nodes_[n].token = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(t);
    first_byte_[static_cast<unsigned char>(t.content[0])] = true;
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t i, bool parse_special, size_t& end) const {
    int32_t best = -1;
    int32_t n = 0;
    for (size_t k = i; k < text.size(); ++k) {
        int32_t child = -1;
        for (auto [ch, idx] : nodes_[n].next)
            if (ch == static_cast<unsigned char>(text[k])) child = idx;
        if (child < 0) break;
        n = child;
        const int32_t t = nodes_[n].token;
        if (t < 0) continue;
        const AddedToken& tok = tokens_[t];
        if (tok.special && !parse_special) continue;
        if (tok.single_word) {
            if (i > 0 && is_word_char(char_before(text, i))) continue;
            size_t j = k + 1;
            if (j < text.size() && is_word_char(utf8::next(text, j))) continue;
        }
        best = t;
        end = k + 1;
    }
    return best;
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special, std::vector<Piece>& out) const {
    size_t plain = 0;  // start of the plain text not yet emitted
    size_t i = 0;
    while (i < text.size()) {
        if (!first_byte_[static_cast<unsigned char>(text[i])]) {
            ++i;
            continue;
        }
        size_t end = 0;
        const int32_t t = longest_at(text, i, parse_special, end);
        if (t < 0) {
            ++i;
            continue;
        }
        const AddedToken& tok = tokens_[t];
        size_t b = i;
        while (tok.lstrip && b > plain) {
            const size_t s = char_start_before(text, b);
            size_t j = s;
            if (!utf8::is_space(utf8::next(text, j))) break;
            b = s;
        }
        while (tok.rstrip && end < text.size()) {
            size_t j = end;
            if (!utf8::is_space(utf8::next(text, j))) break;
            end = j;
        }
        if (b > plain) out.push_back({text.substr(plain, b - plain), -1});
        out.push_back({text.substr(i, tok.content.size()), tok.id});
        plain = i = end;
    }
    if (plain < text.size()) out.push_back({text.substr(plain), -1});
}

}  // namespace grimoire
