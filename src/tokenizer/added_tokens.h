// Added tokens (special and not) are found in the raw text before normalization and BPE: leftmost match first,
// and among matches starting at the same place the longest, as `tokenizers` does. Their lstrip / rstrip flags
// swallow the whitespace beside them and single_word refuses matches inside a word.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace grimoire {

struct AddedToken {
    int32_t id = -1;
    std::string content;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;  // matched on the normalized text instead of the raw text
    bool single_word = false;
};

class AddedTokenMatcher {
public:
    // One piece of the input: an added token (id >= 0) or plain text to encode (id == -1).
    struct Piece {
        std::string_view text;
        int32_t id;
    };

    AddedTokenMatcher() : nodes_(1) {}
    void add(const AddedToken& t);
    bool empty() const { return tokens_.empty(); }

    // Cuts `text` into pieces. With parse_special == false, tokens marked special are treated as plain text
    // (non-special added tokens such as <think> are still recognised).
    void split(std::string_view text, bool parse_special, std::vector<Piece>& out) const;

private:
    struct Node {
        std::vector<std::pair<unsigned char, int32_t>> next;
        int32_t token = -1;  // index into tokens_ of the token ending here
    };
    // Longest enabled token starting at text[i]: its index and end, or -1.
    int32_t longest_at(std::string_view text, size_t i, bool parse_special, size_t& end) const;

    std::vector<Node> nodes_;
    std::vector<AddedToken> tokens_;
    bool first_byte_[256] = {};
};

}  // namespace grimoire
