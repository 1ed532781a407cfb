// Text normalization applied to each segment between added tokens, before pre-tokenization: the
// `normalizer` of tokenizer.json (NFC for Qwen, Prepend("▁") + Replace(" ", "▁") for Llama-2 style files).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace grimoire {

class Normalizer {
public:
    enum class Kind { NFC, NFD, NFKC, NFKD, Prepend, Replace, Lowercase, Strip };
    struct Step {
        Kind kind;
        std::string a;  // Prepend: the prefix; Replace: the pattern
        std::string b;  // Replace: the replacement
        bool left = false, right = false;  // Strip
    };

    void add(Step s) { steps_.push_back(std::move(s)); }
    bool empty() const { return steps_.empty(); }

    // The normalized text: `in` itself when nothing changed, else a view of `scratch`.
    std::string_view apply(std::string_view in, std::string& scratch) const;

private:
    std::vector<Step> steps_;
};

}  // namespace grimoire
