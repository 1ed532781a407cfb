// Pre-tokenization: cuts a normalized segment into the words the BPE model sees (the `pre_tokenizer` of
// tokenizer.json). Regexes run through PCRE2 with UTF + UCP so \p{L}, \p{N} and \s are Unicode-aware, with
// JIT when available; invalid UTF-8 in the input is tolerated (those bytes are never matched).
#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace grimoire {

// The pre-tokenizer regex of Qwen2/Qwen3 (also the default for a vocab.json + merges.txt directory).
extern const char* const kQwen2Pattern;
// The GPT-2 regex, used by ByteLevel with use_regex: true.
extern const char* const kGpt2Pattern;

class Regex {
public:
    // Throws Error prefixed with `where` when the pattern does not compile.
    Regex(const std::string& pattern, const std::string& where);
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;
    // Calls f(start, end) for each non-overlapping match, left to right; empty matches are skipped.
    void for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& f) const;

private:
    void* code_;  // pcre2_code_8*
};

class PreTokenizer {
public:
    // How a Split keeps the delimiters it finds (names as in tokenizer.json).
    enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
    enum class Prepend { Always, First, Never };
    struct Step {
        enum class Kind { Split, ByteLevel, Metaspace } kind;
        std::shared_ptr<Regex> regex;  // Split with a regex; ByteLevel with use_regex
        std::string literal;           // Split with a plain string pattern
        Behavior behavior = Behavior::Isolated;
        bool invert = false;
        bool add_prefix_space = false;  // ByteLevel
        std::string replacement;        // Metaspace, usually "▁"
        Prepend prepend = Prepend::Always;
        bool split = true;  // Metaspace
    };

    void add(Step s) { steps_.push_back(std::move(s)); }
    bool empty() const { return steps_.empty(); }

    // Appends the words of `text` to `words`. Words point into `text` or into strings kept in `arena`.
    // `at_origin`: text starts the whole input (Metaspace's prepend_scheme "first" only prepends there).
    void run(std::string_view text, bool at_origin, std::vector<std::string_view>& words,
             std::deque<std::string>& arena) const;

private:
    std::vector<Step> steps_;
};

}  // namespace grimoire
