// Reasoning / content split: whole text at once, and the same text cut into every possible pair of pieces
// (several tokens per step, tags split mid-way) must give identical results.
#include <gtest/gtest.h>

#include "server/reasoning.h"

using grimoire::server::ReasoningDelta;
using grimoire::server::ReasoningParser;

namespace {

ReasoningDelta run_pieces(bool enabled, bool open, const std::vector<std::string>& pieces) {
    ReasoningParser p(enabled, open);
    ReasoningDelta all;
    for (const auto& s : pieces) {
        auto d = p.push(s);
        all.reasoning += d.reasoning;
        all.content += d.content;
    }
    auto d = p.flush();
    all.reasoning += d.reasoning;
    all.content += d.content;
    return all;
}

// Checks one-shot output, then every split into three pieces against it.
void expect_split(bool enabled, bool open, const std::string& text, const std::string& reasoning,
                  const std::string& content) {
    auto whole = run_pieces(enabled, open, {text});
    EXPECT_EQ(whole.reasoning, reasoning) << text;
    EXPECT_EQ(whole.content, content) << text;
    for (size_t i = 0; i <= text.size(); ++i)
        for (size_t j = i; j <= text.size(); ++j) {
            auto d = run_pieces(enabled, open, {text.substr(0, i), text.substr(i, j - i), text.substr(j)});
            ASSERT_EQ(d.reasoning, reasoning) << "split " << i << "," << j << " of " << text;
            ASSERT_EQ(d.content, content) << "split " << i << "," << j << " of " << text;
        }
}

}  // namespace

TEST(Reasoning, ModelOpensThink) {
    expect_split(true, false, "<think>\nLet me think.\n</think>\n\nThe answer is 4.", "Let me think.",
                 "The answer is 4.");
}

TEST(Reasoning, TemplateOpensThink) {
    expect_split(true, true, "\nstep 1, step 2\n</think>\n\nDone.", "step 1, step 2", "Done.");
}

TEST(Reasoning, NoThinkIsAllContent) {
    expect_split(true, false, "Hello <think> is not at the start", "", "Hello <think> is not at the start");
    expect_split(true, false, "<thin", "", "<thin");
}

TEST(Reasoning, DisabledPassesTagsThrough) {
    expect_split(false, false, "<think>x</think>y", "", "<think>x</think>y");
}

TEST(Reasoning, UnclosedReasoningEndsAsReasoning) {
    // The model ran out of tokens inside its thoughts; a partial close tag is text it wrote.
    expect_split(true, true, "thinking hard </thi", "thinking hard </thi", "");
}

TEST(Reasoning, EmptyThinkBlockWhenThinkingDisabled) {
    // Qwen3 with enable_thinking=false puts "<think>\n\n</think>\n\n" in the prompt: the output is content.
    expect_split(true, false, "Just the answer.", "", "Just the answer.");
    expect_split(true, false, "<think>\n\n</think>\n\nAnswer", "", "Answer");
}

TEST(Reasoning, WhitespaceInsideReasoningIsKept) {
    expect_split(true, true, "a \n b\n\n c</think>d", "a \n b\n\n c", "d");
}

TEST(Reasoning, StreamingHoldsOnlyTagPrefixes) {
    ReasoningParser p(true, true);
    EXPECT_EQ(p.push("abc").reasoning, "abc");
    EXPECT_EQ(p.push(" def</").reasoning, " def");  // "</" may start </think>
    auto d = p.push("b>");                              // it did not
    EXPECT_EQ(d.reasoning, "</b>");
    d = p.push("</think>xyz");
    EXPECT_EQ(d.reasoning, "");
    EXPECT_EQ(d.content, "xyz");
    EXPECT_FALSE(p.in_reasoning());
}
