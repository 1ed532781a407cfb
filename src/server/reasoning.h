// Splits generated text into reasoning (between <think> and </think>) and content, incrementally. The parser
// sees text, not tokens, so it is correct whatever number of tokens one step delivers and whether the tags are
// single added tokens or spelled out in several pieces. Tag fragments are held back until decided.
//
// Two ways a reasoning block starts: the template opened `<think>` in the generation prompt (Qwen3.5,
// DeepSeek-R1 style; start_open = true), or the model writes `<think>` itself first (Qwen3). Whitespace right
// after a tag and right before `</think>` is dropped, as the tags' own layout rather than text.
#pragma once
#include <string>
#include <string_view>

namespace grimoire::server {

struct ReasoningDelta {
    std::string reasoning, content;
    bool empty() const { return reasoning.empty() && content.empty(); }
};

class ReasoningParser {
public:
    // enabled = false passes all text through as content.
    ReasoningParser(bool enabled, bool start_open);

    ReasoningDelta push(std::string_view text);
    ReasoningDelta flush();  // end of generation
    bool in_reasoning() const { return state_ == State::REASONING; }

private:
    enum class State { MAYBE_OPEN, REASONING, CONTENT };
    void run(ReasoningDelta& out, bool final);

    State state_;
    std::string buf_;          // undecided text
    bool strip_leading_ = false;  // drop whitespace at the start of the current section
};

}  // namespace grimoire::server
