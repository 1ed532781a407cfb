// The generated text's way to the client: stop strings first (so nothing after a stop string reaches the
// other parsers), then reasoning vs content, then tool calls out of the content. Streaming and non-streaming
// responses both come from this one chain, which is why they agree.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning.h"
#include "server/stop_matcher.h"
#include "server/tool_calls.h"

namespace grimoire::server {

struct OutputOptions {
    std::vector<std::string> stop;
    bool reasoning = false;         // the template knows <think>
    bool reasoning_open = false;    // the generation prompt already opened <think>
    ToolFormat tools = ToolFormat::NONE;
    nlohmann::ordered_json tool_defs;       // the request's tools (for typing XML parameters)
    std::string prefill;            // text appended to the prompt, parsed but never sent (tool_choice)
};

struct OutputDelta {
    std::string reasoning, content;
    std::vector<ToolCall> calls;
    bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
    void append(OutputDelta&& d);
};

class OutputParser {
public:
    explicit OutputParser(const OutputOptions& opt);

    OutputDelta push(std::string_view text);
    OutputDelta finish();                              // end of generation
    bool stopped() const { return stop_.stopped(); }  // a stop string ended the text
    int tool_calls() const { return tools_.calls_emitted(); }

private:
    OutputDelta parse(std::string_view text, bool final);

    StopMatcher stop_;
    ReasoningParser reasoning_;
    ToolCallParser tools_;
    bool finished_ = false;
};

}  // namespace grimoire::server
