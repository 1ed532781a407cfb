// libFuzzer target for the server's edge: arbitrary bytes as a request body through parse_body and every
// request parser, and as generated text through the output parsers (stop strings, reasoning, both tool-call
// formats, cut at a fuzzer-chosen point as streaming would). Anything but an ApiError escaping, a crash, a
// sanitizer report or a hang is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/api_error.h"
#include "server/output_parser.h"
#include "server/request.h"

using namespace grimoire::server;

namespace {

void parse_all(const std::string& body) {
    ojson j;
    try {
        j = parse_body(body);
    } catch (const ApiError&) {
        return;
    }
    try { parse_chat_request(j); } catch (const ApiError&) {}
    try { parse_completion_request(j); } catch (const ApiError&) {}
    try { parse_tokenize_request(j); } catch (const ApiError&) {}
    try { parse_detokenize_request(j); } catch (const ApiError&) {}
}

void parse_output(const std::string& text, size_t cut, uint8_t flags) {
    OutputOptions o;
    o.reasoning = flags & 1;
    o.reasoning_open = flags & 2;
    o.tools = (flags & 4) ? ToolFormat::XML : (flags & 8) ? ToolFormat::HERMES_JSON : ToolFormat::NONE;
    o.tool_defs = ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"properties":
        {"n": {"type": "integer"}, "s": {"type": "string"}, "o": {"type": "object"}}}}}])");
    if (flags & 16) o.stop = {"</", "\n\n"};
    OutputParser whole(o), pieces(o);
    OutputDelta a = whole.push(text);
    a.append(whole.finish());
    OutputDelta b = pieces.push(text.substr(0, cut));
    b.append(pieces.push(text.substr(cut)));
    b.append(pieces.finish());
    // Streaming and one-shot parsing agree on everything but the random call ids.
    if (a.content != b.content || a.reasoning != b.reasoning || a.calls.size() != b.calls.size()) __builtin_trap();
    for (size_t i = 0; i < a.calls.size(); ++i)
        if (a.calls[i].name != b.calls[i].name || a.calls[i].arguments != b.calls[i].arguments) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string s(reinterpret_cast<const char*>(data), size);
    parse_all(s);
    if (size >= 2) parse_output(s.substr(2), data[0] % (size - 1), data[1]);
    return 0;
}
