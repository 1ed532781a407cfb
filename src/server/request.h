// OpenAI request bodies parsed and validated once, at the edge, into typed structs: nothing downstream
// re-checks a field. Every rejection is an ApiError 400 naming the field (`param`). Unknown fields are
// ignored (clients send many); null means absent, as the OpenAI API treats it. JSON objects keep the client's
// key order (ordered_json) because templates render `tools | tojson` in that order.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sample/sampler.h"

namespace grimoire::server {

using ojson = nlohmann::ordered_json;

// Fields shared by /v1/chat/completions and /v1/completions.
struct GenerationParams {
    std::optional<int64_t> max_tokens;  // max_completion_tokens wins over max_tokens; none = up to the context
    SamplingParams sampling;
    std::vector<std::string> stop;      // non-empty strings, matched on text
    bool stream = false;
    bool include_usage = false;         // stream_options.include_usage
    bool logprobs = false;
    int top_logprobs = 0;               // 0..20 alternatives per token
    bool ignore_eos = false;
    int64_t min_tokens = 0;
    bool return_token_ids = false;      // per-chunk / per-choice `token_ids`
};

enum class ToolChoice { AUTO, NONE, REQUIRED, NAMED };

struct ChatRequest {
    std::string model;                  // "" when the client sent none
    ojson messages;                     // validated; text parts joined, tool-call arguments as objects
    ojson tools;                        // array, or null when none
    ToolChoice tool_choice = ToolChoice::AUTO;
    std::string tool_name;              // for NAMED
    ojson chat_template_kwargs = ojson::object();
    bool add_generation_prompt = true;
    GenerationParams gen;
};

struct CompletionRequest {
    std::string model;
    std::optional<std::string> prompt_text;   // exactly one of these two is set
    std::vector<int32_t> prompt_ids;
    GenerationParams gen;
};

// POST /tokenize: a prompt, or messages rendered with the chat options.
struct TokenizeRequest {
    std::optional<std::string> prompt;
    std::optional<ChatRequest> chat;
    bool add_special_tokens = true;     // prompt: prepend BOS when the tokenizer does
    bool return_token_strs = false;
};

ChatRequest parse_chat_request(const ojson& body);
CompletionRequest parse_completion_request(const ojson& body);
TokenizeRequest parse_tokenize_request(const ojson& body);
std::vector<int32_t> parse_detokenize_request(const ojson& body);

// Parses a request body; malformed JSON or a non-object is a 400.
ojson parse_body(const std::string& body);

}  // namespace grimoire::server
