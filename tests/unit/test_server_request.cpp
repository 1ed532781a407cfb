// Request parsing and validation: every field reaches its typed slot, null means absent, unknown fields are
// ignored, and each bad input is a 400 naming the field.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/request.h"

using namespace grimoire::server;

namespace {

ojson J(const char* s) { return ojson::parse(s); }

// Expects a 400 (or `status`) whose `param` is `param`.
template <class F>
void expect_error(F f, const std::string& param, int status = 400) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one on " << param;
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), status) << e.what();
        EXPECT_EQ(e.param(), param) << e.what();
        EXPECT_EQ(e.body()["error"]["type"], "invalid_request_error");
        EXPECT_FALSE(std::string(e.what()).empty());
    }
}

void bad_chat(const std::string& extra, const std::string& param) {
    const std::string body = R"({"model": "m", "messages": [{"role": "user", "content": "hi"}])" +
                             (extra.empty() ? "" : ", " + extra) + "}";
    expect_error([&] { parse_chat_request(J(body.c_str())); }, param);
}

}  // namespace

TEST(ServerRequest, ChatFieldsAreTyped) {
    auto r = parse_chat_request(J(R"({
        "model": "demo", "messages": [{"role": "system", "content": "be brief"},
                                      {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                   {"type": "text", "text": "b"}]}],
        "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 50,
        "max_completion_tokens": 40, "temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.05,
        "seed": -3, "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
        "stop": ["\n\n", ""], "logprobs": true, "top_logprobs": 3, "n": 1, "ignore_eos": true,
        "min_tokens": 5, "return_token_ids": true, "chat_template_kwargs": {"enable_thinking": false},
        "response_format": {"type": "text"}, "user": "someone", "some_future_field": [1, 2, 3]})"));
    EXPECT_EQ(r.model, "demo");
    EXPECT_EQ(r.messages[1]["content"], "a\nb");
    EXPECT_TRUE(r.gen.stream);
    EXPECT_TRUE(r.gen.include_usage);
    EXPECT_EQ(r.gen.max_tokens, 40);  // max_completion_tokens wins
    EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 0.5f);
    EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 0.9f);
    EXPECT_EQ(r.gen.sampling.top_k, 20);
    EXPECT_FLOAT_EQ(r.gen.sampling.min_p, 0.05f);
    EXPECT_TRUE(r.gen.sampling.has_seed);
    EXPECT_EQ(r.gen.sampling.seed, uint64_t(int64_t(-3)));
    EXPECT_FLOAT_EQ(r.gen.sampling.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(r.gen.sampling.frequency_penalty, -0.5f);
    EXPECT_FLOAT_EQ(r.gen.sampling.repetition_penalty, 1.1f);
    EXPECT_EQ(r.gen.stop, std::vector<std::string>{"\n\n"});
    EXPECT_TRUE(r.gen.logprobs);
    EXPECT_EQ(r.gen.top_logprobs, 3);
    EXPECT_TRUE(r.gen.ignore_eos);
    EXPECT_EQ(r.gen.min_tokens, 5);
    EXPECT_TRUE(r.gen.return_token_ids);
    EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
    EXPECT_TRUE(r.tools.is_null());
}

TEST(ServerRequest, NullsAreAbsentAndDefaultsHold) {
    auto r = parse_chat_request(J(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": null,
                                     "temperature": null, "stop": null, "tools": null, "seed": null,
                                     "max_completion_tokens": 16.0})"));
    EXPECT_EQ(r.model, "");
    EXPECT_EQ(r.gen.max_tokens, 16);
    EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 1.0f);
    EXPECT_FALSE(r.gen.sampling.has_seed);
    EXPECT_TRUE(r.gen.stop.empty());
    EXPECT_FALSE(r.gen.stream);
    EXPECT_TRUE(r.add_generation_prompt);
}

TEST(ServerRequest, ToolsAndHistory) {
    auto r = parse_chat_request(J(R"({"messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"}}}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})"));
    EXPECT_EQ(r.tool_choice, ToolChoice::NAMED);
    EXPECT_EQ(r.tool_name, "get_weather");
    // The JSON-string arguments became an object, keys in the client's order.
    EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"].dump(), R"({"city":"Paris","days":2})");
    EXPECT_TRUE(r.messages[1]["content"].is_null());
    EXPECT_EQ(r.tools.size(), 1u);
    EXPECT_EQ(parse_chat_request(J(R"({"messages": [{"role": "user", "content": "x"}], "tools": [
        {"type": "function", "function": {"name": "f"}}], "tool_choice": "required"})")).tool_choice,
              ToolChoice::REQUIRED);
    EXPECT_EQ(parse_chat_request(J(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none"})"))
                  .tool_choice,
              ToolChoice::NONE);
}

TEST(ServerRequest, BadChatInputs) {
    bad_chat(R"("max_tokens": -5)", "max_tokens");
    bad_chat(R"("max_tokens": 0)", "max_tokens");
    bad_chat(R"("max_tokens": 1e30)", "max_tokens");
    bad_chat(R"("max_tokens": 99999999999999)", "max_tokens");
    bad_chat(R"("max_tokens": "ten")", "max_tokens");
    bad_chat(R"("max_tokens": 10.5)", "max_tokens");
    bad_chat(R"("max_completion_tokens": -1)", "max_completion_tokens");
    bad_chat(R"("temperature": "hot")", "temperature");
    bad_chat(R"("temperature": -0.1)", "temperature");
    bad_chat(R"("top_p": 0)", "top_p");
    bad_chat(R"("top_p": 1.5)", "top_p");
    bad_chat(R"("top_k": -2)", "top_k");
    bad_chat(R"("min_p": 2)", "min_p");
    bad_chat(R"("presence_penalty": 3)", "presence_penalty");
    bad_chat(R"("frequency_penalty": -3)", "frequency_penalty");
    bad_chat(R"("repetition_penalty": 0)", "repetition_penalty");
    bad_chat(R"("seed": "x")", "seed");
    bad_chat(R"("stop": 5)", "stop");
    bad_chat(R"("stop": ["a", 1])", "stop");
    bad_chat(R"("stream": "yes")", "stream");
    bad_chat(R"("stream_options": 1)", "stream_options");
    bad_chat(R"("stream_options": {"include_usage": 1})", "stream_options.include_usage");
    bad_chat(R"("n": 2)", "n");
    bad_chat(R"("logprobs": 1)", "logprobs");
    bad_chat(R"("top_logprobs": 21, "logprobs": true)", "top_logprobs");
    bad_chat(R"("top_logprobs": 2)", "top_logprobs");
    bad_chat(R"("min_tokens": 10, "max_tokens": 5)", "min_tokens");
    bad_chat(R"("response_format": {"type": "json_object"})", "response_format");
    bad_chat(R"("chat_template_kwargs": [1])", "chat_template_kwargs");
    bad_chat(R"("tools": {"a": 1})", "tools");
    bad_chat(R"("tools": [{"type": "function", "function": {}}])", "tools[0].function.name");
    bad_chat(R"("tools": [{"type": "retrieval"}])", "tools[0].type");
    bad_chat(R"("tool_choice": "always")", "tool_choice");
    bad_chat(R"("tool_choice": "required")", "tool_choice");
    bad_chat(R"("tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}})",
             "tool_choice");
    bad_chat(R"("ignore_eos": "true")", "ignore_eos");
}

TEST(ServerRequest, BadMessages) {
    auto bad = [](const char* messages, const std::string& param) {
        const std::string body = std::string(R"({"messages": )") + messages + "}";
        expect_error([&] { parse_chat_request(J(body.c_str())); }, param);
    };
    bad("[]", "messages");
    bad("\"hi\"", "messages");
    bad("[1]", "messages[0]");
    bad(R"([{"content": "x"}])", "messages[0].role");
    bad(R"([{"role": "wizard", "content": "x"}])", "messages[0].role");
    bad(R"([{"role": "user"}])", "messages[0].content");
    bad(R"([{"role": "user", "content": 5}])", "messages[0].content");
    bad(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])",
        "messages[0].content[0].type");
    bad(R"([{"role": "user", "content": [{"type": "text"}]}])", "messages[0].content[0].text");
    bad(R"([{"role": "user", "content": "x", "tool_calls": []}])", "messages[0].tool_calls");
    bad(R"([{"role": "assistant", "content": null, "tool_calls": [{"function": {"arguments": "{}"}}]}])",
        "messages[0].tool_calls[0].function.name");
    expect_error([] { parse_chat_request(J(R"({"model": "m"})")); }, "messages");
}

TEST(ServerRequest, MalformedBodies) {
    expect_error([] { parse_body("{\"messages\": [}"); }, "");
    expect_error([] { parse_body(""); }, "");
    expect_error([] { parse_body("[1, 2]"); }, "");
    expect_error([] { parse_body("\"just a string\""); }, "");
    EXPECT_NO_THROW(parse_body("{\"a\": 1}"));
}

TEST(ServerRequest, CompletionPrompts) {
    EXPECT_EQ(*parse_completion_request(J(R"({"prompt": "Once"})")).prompt_text, "Once");
    EXPECT_EQ(*parse_completion_request(J(R"({"prompt": ["Once"]})")).prompt_text, "Once");
    EXPECT_EQ(parse_completion_request(J(R"({"prompt": [1, 2, 3]})")).prompt_ids, (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(parse_completion_request(J(R"({"prompt": [[4, 5]]})")).prompt_ids, (std::vector<int32_t>{4, 5}));
    auto r = parse_completion_request(J(R"({"prompt": "x", "logprobs": 2, "echo": false})"));
    EXPECT_TRUE(r.gen.logprobs);
    EXPECT_EQ(r.gen.top_logprobs, 2);
    auto bad = [](const char* body, const std::string& param) {
        expect_error([&] { parse_completion_request(J(body)); }, param);
    };
    bad(R"({})", "prompt");
    bad(R"({"prompt": 5})", "prompt");
    bad(R"({"prompt": []})", "prompt");
    bad(R"({"prompt": ["a", "b"]})", "prompt");
    bad(R"({"prompt": [1, -2]})", "prompt");
    bad(R"({"prompt": [1, "a"]})", "prompt");
    bad(R"({"prompt": "x", "echo": true})", "echo");
    bad(R"({"prompt": "x", "logprobs": true})", "logprobs");
}

TEST(ServerRequest, TokenizeAndDetokenize) {
    auto t = parse_tokenize_request(J(R"({"prompt": "hello", "add_special_tokens": false})"));
    EXPECT_EQ(*t.prompt, "hello");
    EXPECT_FALSE(t.add_special_tokens);
    auto c = parse_tokenize_request(J(R"({"messages": [{"role": "user", "content": "hi"}],
                                          "add_generation_prompt": false})"));
    ASSERT_TRUE(c.chat.has_value());
    EXPECT_FALSE(c.chat->add_generation_prompt);
    expect_error([] { parse_tokenize_request(J("{}")); }, "prompt");
    EXPECT_EQ(parse_detokenize_request(J(R"({"tokens": [7, 8]})")), (std::vector<int32_t>{7, 8}));
    expect_error([] { parse_detokenize_request(J(R"({"tokens": "x"})")); }, "tokens");
}

TEST(ServerRequest, ErrorBodiesFollowOpenAI) {
    auto b = bad_request("`x` is wrong", "x").body();
    EXPECT_EQ(b["error"]["message"], "`x` is wrong");
    EXPECT_EQ(b["error"]["param"], "x");
    EXPECT_TRUE(b["error"]["code"].is_null());
    EXPECT_EQ(unauthorized("no").status(), 401);
    EXPECT_EQ(model_not_found("gpt-9").status(), 404);
    EXPECT_EQ(model_not_found("gpt-9").body()["error"]["code"], "model_not_found");
    EXPECT_EQ(payload_too_large(10, 5).status(), 413);
}
