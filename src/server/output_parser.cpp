#include "server/output_parser.h"

namespace grimoire::server {

void OutputDelta::append(OutputDelta&& d) {
    reasoning += d.reasoning;
    content += d.content;
    for (auto& c : d.calls) calls.push_back(std::move(c));
}

OutputParser::OutputParser(const OutputOptions& opt)
    : stop_(opt.stop), reasoning_(opt.reasoning, opt.reasoning_open), tools_(opt.tools, opt.tool_defs) {
    // The prefill is the start of the model's answer that we wrote for it: the parsers must see it, the client
    // must not (it arrives as the tool call it opens).
    if (!opt.prefill.empty()) parse(opt.prefill, false);
}

OutputDelta OutputParser::parse(std::string_view text, bool final) {
    OutputDelta out;
    ReasoningDelta r = reasoning_.push(text);
    if (final) {
        ReasoningDelta tail = reasoning_.flush();
        r.reasoning += tail.reasoning;
        r.content += tail.content;
    }
    out.reasoning = std::move(r.reasoning);
    ToolDelta t = tools_.push(r.content);
    if (final) {
        ToolDelta tail = tools_.flush();
        t.content += tail.content;
        for (auto& c : tail.calls) t.calls.push_back(std::move(c));
    }
    out.content = std::move(t.content);
    out.calls = std::move(t.calls);
    return out;
}

OutputDelta OutputParser::push(std::string_view text) {
    if (finished_) return {};
    const std::string safe = stop_.push(text);
    // A stop string ends the text here: everything the parsers still hold is final.
    finished_ = stop_.stopped();
    return parse(safe, finished_);
}

OutputDelta OutputParser::finish() {
    if (finished_) return {};
    finished_ = true;
    return parse(stop_.flush(), true);
}

}  // namespace grimoire::server
