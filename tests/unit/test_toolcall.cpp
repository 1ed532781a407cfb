// Tool-call parsing, both formats: one-shot, split into every pair of pieces (several tokens per step, tags
// split mid-way), several calls, text around calls, and malformed calls coming back as text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/output_parser.h"
#include "server/tool_calls.h"

using namespace grimoire::server;
using nlohmann::json;

namespace {

struct Result {
    std::string content;
    std::vector<std::pair<std::string, json>> calls;  // name, parsed arguments
};

Result run_pieces(ToolFormat fmt, const json& tools, const std::vector<std::string>& pieces) {
    ToolCallParser p(fmt, tools);
    Result r;
    auto take = [&](ToolDelta d) {
        r.content += d.content;
        for (auto& c : d.calls) {
            EXPECT_EQ(c.id.size(), 29u);
            EXPECT_EQ(c.id.rfind("call_", 0), 0u);
            r.calls.emplace_back(c.name, json::parse(c.arguments));
        }
    };
    for (const auto& s : pieces) take(p.push(s));
    take(p.flush());
    return r;
}

void expect_split(ToolFormat fmt, const json& tools, const std::string& text, const Result& want) {
    auto whole = run_pieces(fmt, tools, {text});
    EXPECT_EQ(whole.content, want.content);
    EXPECT_EQ(whole.calls, want.calls);
    for (size_t i = 0; i <= text.size(); ++i)
        for (size_t j = i; j <= text.size(); j += 3) {
            auto r = run_pieces(fmt, tools, {text.substr(0, i), text.substr(i, j - i), text.substr(j)});
            ASSERT_EQ(r.content, want.content) << "split " << i << "," << j;
            ASSERT_EQ(r.calls, want.calls) << "split " << i << "," << j;
        }
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
     "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
     "extra": {"type": "object"}, "zip": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
     "query": {"type": "string"}, "limit": {"type": ["integer", "null"]}}}}}
])");

}  // namespace

TEST(ToolCallFormat, ChosenFromTemplate) {
    EXPECT_EQ(tool_format_for_template("{{ '<function=' ~ tool_call.name ~ '>' }}"), ToolFormat::XML);
    EXPECT_EQ(tool_format_for_template("<tool_call>\\n{{ tool_call | tojson }}"), ToolFormat::HERMES_JSON);
}

TEST(ToolCallHermes, SingleCallWithTextBefore) {
    expect_split(ToolFormat::HERMES_JSON, kTools,
                 "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                 "\"days\": 3}}\n</tool_call>",
                 {"Let me check.", {{"get_weather", json{{"city", "Paris"}, {"days", 3}}}}});
}

TEST(ToolCallHermes, TwoCallsAndStringArguments) {
    expect_split(ToolFormat::HERMES_JSON, kTools,
                 "<tool_call>\n{\"name\": \"search\", \"arguments\": \"{\\\"query\\\": \\\"x\\\"}\"}\n</tool_call>\n"
                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>\n",
                 {"", {{"search", json{{"query", "x"}}}, {"get_weather", json::object()}}});
}

TEST(ToolCallHermes, MalformedCallsComeBackAsText) {
    const std::string bad = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>";
    expect_split(ToolFormat::HERMES_JSON, kTools, bad, {bad, {}});
    const std::string no_name = "<tool_call>{\"arguments\": {}}</tool_call> and more";
    expect_split(ToolFormat::HERMES_JSON, kTools, no_name, {no_name, {}});
    const std::string unclosed = "Sure <tool_call>\n{\"name\": \"search\", \"argum";
    expect_split(ToolFormat::HERMES_JSON, kTools, unclosed, {unclosed, {}});
    const std::string not_object = "<tool_call>[1, 2]</tool_call>";
    expect_split(ToolFormat::HERMES_JSON, kTools, not_object, {not_object, {}});
}

TEST(ToolCallHermes, GoodCallAfterMalformedOne) {
    const std::string bad = "<tool_call>nope</tool_call>";
    expect_split(ToolFormat::HERMES_JSON, kTools,
                 bad + "\n<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"q\"}}</tool_call>",
                 {bad, {{"search", json{{"query", "q"}}}}});
}

TEST(ToolCallXml, TypedParameters) {
    expect_split(ToolFormat::XML, kTools,
                 "I'll look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
                 "<parameter=days>\n5\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
                 "<parameter=extra>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=zip>\n01234\n</parameter>\n"
                 "</function>\n</tool_call>",
                 {"I'll look.", {{"get_weather", json::parse(R"({"city": "New York", "days": 5, "metric": true,
                                                         "extra": {"a": [1, 2]}, "zip": "01234"})")}}});
}

TEST(ToolCallXml, MultilineValueAndMissingCloseParameter) {
    expect_split(ToolFormat::XML, kTools,
                 "<tool_call>\n<function=search>\n<parameter=query>\nline one\nline two\n"
                 "<parameter=limit>\n7\n</parameter>\n</function>\n</tool_call>"
                 "<tool_call>\n<function=unknown_fn>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>",
                 {"", {{"search", json{{"query", "line one\nline two"}, {"limit", 7}}},
                       {"unknown_fn", json{{"n", "3"}}}}});
}

TEST(ToolCallXml, MalformedCallsComeBackAsText) {
    for (const std::string& bad : {
             std::string("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</tool_call>"),
             std::string("<tool_call>\n<function=>\n</function>\n</tool_call>"),
             std::string("<tool_call>\n{\"name\": \"get_weather\"}\n</tool_call>"),
             std::string("<tool_call>\n<function=f>\n</function>\ntrailing junk\n</tool_call>"),
         })
        expect_split(ToolFormat::XML, kTools, bad, {bad, {}});
}

TEST(ToolCallNone, PassesEverythingThrough) {
    const std::string text = "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>";
    expect_split(ToolFormat::NONE, kTools, text, {text, {}});
}

TEST(ToolCallPrefill, NamedFunctionCompletesFromPrefill) {
    for (auto fmt : {ToolFormat::HERMES_JSON, ToolFormat::XML}) {
        OutputOptions opt;
        opt.tools = fmt;
        opt.tool_defs = kTools;
        opt.prefill = tool_call_prefill(fmt, "search");
        OutputParser p(opt);
        const std::string rest = fmt == ToolFormat::XML
                                     ? "<parameter=query>\ncats\n</parameter>\n</function>\n</tool_call>"
                                     : "{\"query\": \"cats\"}}\n</tool_call>";
        OutputDelta all;
        for (char c : rest) all.append(p.push(std::string(1, c)));
        all.append(p.finish());
        ASSERT_EQ(all.calls.size(), 1u);
        EXPECT_EQ(all.calls[0].name, "search");
        EXPECT_EQ(json::parse(all.calls[0].arguments), json({{"query", "cats"}}));
        EXPECT_EQ(all.content, "");
    }
}

TEST(ToolCallPipeline, ReasoningThenCall) {
    OutputOptions opt;
    opt.reasoning = true;
    opt.tools = ToolFormat::HERMES_JSON;
    opt.tool_defs = kTools;
    const std::string text =
        "<think>\nThe user wants weather. <tool_call> is how I call.\n</think>\n\n<tool_call>\n"
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
    for (size_t step : {1, 2, 5, 1000}) {
        OutputParser p(opt);
        OutputDelta all;
        for (size_t i = 0; i < text.size(); i += step) all.append(p.push(text.substr(i, step)));
        all.append(p.finish());
        EXPECT_EQ(all.reasoning, "The user wants weather. <tool_call> is how I call.");
        EXPECT_EQ(all.content, "");
        ASSERT_EQ(all.calls.size(), 1u) << step;
        EXPECT_EQ(all.calls[0].arguments, "{\"city\":\"Oslo\"}");
    }
}
