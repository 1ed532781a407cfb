// Stop strings across token boundaries: never emitted (not even in part), held-back prefixes released when
// they turn out not to be a stop, and the earliest match winning.
#include <gtest/gtest.h>

#include "server/output_parser.h"
#include "server/stop_matcher.h"

using namespace grimoire::server;

namespace {

std::pair<std::string, bool> run(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
    StopMatcher m(stops);
    std::string out;
    for (const auto& p : pieces) out += m.push(p);
    out += m.flush();
    return {out, m.stopped()};
}

}  // namespace

TEST(StopMatcher, PartialSuffix) {
    EXPECT_EQ(partial_suffix("hello wor", "world"), 3u);
    EXPECT_EQ(partial_suffix("hello", "world"), 0u);
    EXPECT_EQ(partial_suffix("world", "world"), 0u);  // a whole match is not a partial one
    EXPECT_EQ(partial_suffix("aaa", "aab"), 2u);
}

TEST(StopMatcher, EverySplitGivesTheSameText) {
    const std::string text = "The end.\nUser: more text";
    for (size_t i = 0; i <= text.size(); ++i)
        for (size_t j = i; j <= text.size(); ++j) {
            auto [out, stopped] = run({"\nUser:"}, {text.substr(0, i), text.substr(i, j - i), text.substr(j)});
            ASSERT_EQ(out, "The end.") << i << "," << j;
            ASSERT_TRUE(stopped);
        }
}

TEST(StopMatcher, HoldsOnlyWhatCouldStillMatch) {
    StopMatcher m({"STOP"});
    EXPECT_EQ(m.push("abc ST"), "abc ");
    EXPECT_EQ(m.push("O"), "");
    EXPECT_EQ(m.push("RM"), "STORM");
    EXPECT_FALSE(m.stopped());
    EXPECT_EQ(m.push("xx STOP yy"), "xx ");
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(m.push("more"), "");
    EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, EarliestMatchWins) {
    EXPECT_EQ(run({"cd", "abcdef"}, {"xxabcdefg"}).first, "xx");
    EXPECT_EQ(run({"cd", "abcdef"}, {"xxabcd"}).first, "xxab");
    EXPECT_EQ(run({"b", "ab"}, {"xab"}).first, "x");
    // A longer stop that starts earlier wins even when a shorter one completes first in the stream.
    for (auto pieces : std::vector<std::vector<std::string>>{{"xab", "cd"}, {"xabcd"}, {"x", "a", "b", "c"}})
        EXPECT_EQ(run({"abc", "b"}, pieces).first, "x");
    auto [out, stopped] = run({"abc", "b"}, {"xab"});  // "abc" never completes: "b" stops it at the end
    EXPECT_EQ(out, "xa");
    EXPECT_TRUE(stopped);
}

TEST(StopMatcher, UnfinishedPrefixIsReleasedAtTheEnd) {
    auto [out, stopped] = run({"</s>"}, {"tail </"});
    EXPECT_EQ(out, "tail </");
    EXPECT_FALSE(stopped);
}

TEST(StopMatcher, MultibyteStops) {
    EXPECT_EQ(run({"。"}, {"你好", "\xe3\x80", "\x82", "再见"}).first, "你好");
}

TEST(OutputParser, StopInsideReasoningEndsEverything) {
    OutputOptions opt;
    opt.reasoning = true;
    opt.stop = {"###"};
    OutputParser p(opt);
    OutputDelta all;
    for (std::string s : {"<think>plan ", "#", "## hidden", "</think>answer"}) all.append(p.push(s));
    all.append(p.finish());
    EXPECT_TRUE(p.stopped());
    EXPECT_EQ(all.reasoning, "plan");
    EXPECT_EQ(all.content, "");
}
