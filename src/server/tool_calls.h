// Parses the model's tool calls out of the content text, incrementally. Two formats, chosen from the chat
// template (tool_format_for_template):
//   HERMES_JSON (Qwen3, Qwen2.5, Hermes):  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   XML (Qwen3-Coder, Qwen3.5):            <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n
//                                          </function>\n</tool_call>
// A call is emitted once its closing tag arrives and its body parses; a body that does not parse, or a call
// never closed, goes back out as plain content, exactly as generated. Text is the unit, so several tokens per
// step, split tags and tags spelled in pieces are all the same to it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace grimoire::server {

enum class ToolFormat { NONE, HERMES_JSON, XML };

// A template that writes `<function=` renders tools the Qwen3-Coder way; any other template that renders
// tools gets the Hermes JSON format.
ToolFormat tool_format_for_template(std::string_view template_source);

struct ToolCall {
    std::string id;         // "call_" + 24 random alphanumerics
    std::string name;
    std::string arguments;  // a JSON object, serialised
};

struct ToolDelta {
    std::string content;
    std::vector<ToolCall> calls;
};

class ToolCallParser {
public:
    // tools: the request's `tools` array (XML values are typed by the parameter schemas). NONE passes through.
    ToolCallParser(ToolFormat format, nlohmann::ordered_json tools);

    ToolDelta push(std::string_view text);
    ToolDelta flush();
    int calls_emitted() const { return n_calls_; }

    // Parses one call body (the text between <tool_call> and </tool_call>); false when malformed.
    bool parse_body(std::string_view body, ToolCall& call) const;

private:
    void run(ToolDelta& out, bool final);
    void emit_text(ToolDelta& out, std::string_view text, bool final);

    ToolFormat format_;
    nlohmann::ordered_json tools_;
    std::string buf_;
    bool in_call_ = false;
    std::string pending_space_;  // whitespace that is dropped if only tool calls surround it
    int n_calls_ = 0;
};

// The tool-choice prefill: text appended to the generation prompt (and fed through the parser unseen) that
// makes the model's answer start with a call. `required` opens a call; a named function also names it.
std::string tool_call_prefill(ToolFormat format, const std::string& function_name);

}  // namespace grimoire::server
