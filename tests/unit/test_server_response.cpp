// Response building with the real Qwen3 tokenizer (../shared/data/tokenizers/qwen3): token ids in, OpenAI
// chunks and bodies out. The stream, concatenated, must equal the non-streamed body for every batching of the
// same tokens (one token per step or several), and usage / token_ids / finish_reason must add up.
#include <gtest/gtest.h>

#include "server/response.h"
#include "../test_util.h"

using namespace grimoire;
using namespace grimoire::server;

namespace {

const Tokenizer& qwen3() {
    static auto tok = Tokenizer::load(test::shared_dir() + "/data/tokenizers/qwen3");
    return *tok;
}

struct Collected {
    std::string reasoning, content, finish;
    std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
    std::vector<int32_t> ids;
    ojson usage, body;
    int n_logprob_entries = 0;
};

// Runs `text` (tokenised, plus an <|im_end|> at the end when `eos`) through a builder in batches of `step`.
Collected run(const std::string& text, size_t step, OutputOptions out, GenerationParams gen, bool eos = true,
              bool chat = true) {
    const Tokenizer& tok = qwen3();
    Prepared prep;
    prep.prompt = {1, 2, 3, 4, 5};
    prep.output = std::move(out);
    prep.stop_ids = {tok.token_to_id("<|im_end|>")};
    std::vector<int32_t> ids = tok.encode(text);
    if (eos) ids.push_back(prep.stop_ids[0]);
    ResponseBuilder b(tok, prep, gen, {chat, new_response_id(chat), 1700000000, "m", "fp"});
    Collected c;
    auto take = [&](const std::vector<ojson>& chunks) {
        for (const auto& ch : chunks) {
            EXPECT_EQ(ch["object"], chat ? "chat.completion.chunk" : "text_completion");
            if (ch.contains("usage") && !ch["usage"].is_null()) {
                EXPECT_TRUE(ch["choices"].empty());
                c.usage = ch["usage"];
                continue;
            }
            const auto& choice = ch["choices"][0];
            if (chat) {
                const auto& d = choice["delta"];
                if (d.contains("reasoning_content")) c.reasoning += d["reasoning_content"].get<std::string>();
                if (d.contains("content")) c.content += d["content"].get<std::string>();
                if (d.contains("tool_calls"))
                    for (const auto& tc : d["tool_calls"])
                        c.calls.emplace_back(tc["function"]["name"], tc["function"]["arguments"]);
            } else {
                c.content += choice["text"].get<std::string>();
            }
            if (choice.contains("token_ids"))
                for (int32_t id : choice["token_ids"]) c.ids.push_back(id);
            if (!choice["logprobs"].is_null())
                c.n_logprob_entries += int((chat ? choice["logprobs"]["content"] : choice["logprobs"]["tokens"]).size());
            if (!choice["finish_reason"].is_null()) c.finish = choice["finish_reason"];
        }
    };
    bool stopped = false;
    for (size_t i = 0; i < ids.size() && !stopped; i += step) {
        std::vector<TokenEvent> evs;
        for (size_t j = i; j < std::min(ids.size(), i + step); ++j) {
            TokenEvent e;
            e.id = ids[j];
            e.logprob = -0.5f;
            e.top = {{ids[j], -0.5f}, {0, -2.0f}};
            evs.push_back(e);
        }
        take(b.on_tokens(evs));
        stopped = b.done();
    }
    take(b.on_finish({stopped ? "cancelled" : eos ? "stop" : "length", "", 5, int64_t(ids.size())}));
    c.body = b.full_response();
    return c;
}

void expect_same_as_body(const Collected& c) {
    const auto& msg = c.body["choices"][0]["message"];
    EXPECT_EQ(c.content, msg["content"].is_null() ? "" : msg["content"].get<std::string>());
    EXPECT_EQ(c.reasoning, msg["reasoning_content"].is_null() ? "" : msg["reasoning_content"].get<std::string>());
    EXPECT_EQ(c.finish, c.body["choices"][0]["finish_reason"]);
    EXPECT_EQ(c.usage, c.body["usage"]);
}

}  // namespace

TEST(ServerResponse, ReasoningStreamEqualsBodyForEveryStep) {
    OutputOptions out;
    out.reasoning = true;
    GenerationParams gen;
    gen.include_usage = true;
    gen.return_token_ids = true;
    const std::string text = "<think>\nThe user greets me. 你好!\n</think>\n\nHello there, friend.";
    for (size_t step : {1, 2, 3, 7, 100}) {
        Collected c = run(text, step, out, gen);
        EXPECT_EQ(c.reasoning, "The user greets me. 你好!") << step;
        EXPECT_EQ(c.content, "Hello there, friend.") << step;
        EXPECT_EQ(c.finish, "stop");
        expect_same_as_body(c);
        // Every generated token (the <|im_end|> too) is reported once across the chunks and in usage.
        const auto all = qwen3().encode(text);
        EXPECT_EQ(c.ids.size(), all.size() + 1);
        EXPECT_EQ(c.usage["completion_tokens"], int64_t(all.size() + 1));
        EXPECT_EQ(c.usage["prompt_tokens"], 5);
        EXPECT_EQ(c.usage["total_tokens"], int64_t(all.size() + 6));
    }
}

TEST(ServerResponse, ToolCallsStreamAndFinishReason) {
    OutputOptions out;
    out.reasoning = true;
    out.tools = ToolFormat::HERMES_JSON;
    GenerationParams gen;
    const std::string text =
        "<think>\nneed weather\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    for (size_t step : {1, 4, 50}) {
        Collected c = run(text, step, out, gen);
        ASSERT_EQ(c.calls.size(), 2u) << step;
        EXPECT_EQ(c.calls[0], (std::pair<std::string, std::string>{"get_weather", "{\"city\":\"Paris\"}"}));
        EXPECT_EQ(c.calls[1].first, "get_time");
        EXPECT_EQ(c.finish, "tool_calls");
        EXPECT_EQ(c.content, "");
        const auto& msg = c.body["choices"][0]["message"];
        EXPECT_TRUE(msg["content"].is_null());
        ASSERT_EQ(msg["tool_calls"].size(), 2u);
        EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
        EXPECT_EQ(msg["tool_calls"][1]["function"]["name"], "get_time");
        EXPECT_EQ(msg["reasoning_content"], "need weather");
    }
}

TEST(ServerResponse, StopStringEndsTheAnswer) {
    OutputOptions out;
    out.stop = {"friend"};
    GenerationParams gen;
    gen.include_usage = true;
    for (size_t step : {1, 3}) {
        Collected c = run("Hello there, friend. More text after.", step, out, gen, /*eos=*/false);
        EXPECT_EQ(c.content, "Hello there, ");
        EXPECT_EQ(c.finish, "stop");
        expect_same_as_body(c);
        // Tokens after the stop string are not counted.
        EXPECT_LE(c.usage["completion_tokens"].get<int>(), int(qwen3().encode("Hello there, friend").size()) + 2);
    }
}

TEST(ServerResponse, LengthAndLogprobs) {
    OutputOptions out;
    GenerationParams gen;
    gen.logprobs = true;
    gen.top_logprobs = 2;
    Collected c = run("One two three", 2, out, gen, /*eos=*/false);
    EXPECT_EQ(c.content, "One two three");
    EXPECT_EQ(c.finish, "length");
    const auto n = qwen3().encode("One two three").size();
    EXPECT_EQ(size_t(c.n_logprob_entries), n);
    const auto& lp = c.body["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(lp.size(), n);
    EXPECT_EQ(lp[0]["token"], "One");
    EXPECT_FLOAT_EQ(lp[0]["logprob"].get<float>(), -0.5f);
    EXPECT_EQ(lp[0]["top_logprobs"].size(), 2u);
    EXPECT_EQ(lp[1]["bytes"], ojson::array({32, 116, 119, 111}));  // " two"
}

TEST(ServerResponse, CompletionTextChunks) {
    OutputOptions out;
    GenerationParams gen;
    gen.logprobs = true;
    Collected c = run("<think>raw text</think> stays", 1, out, gen, /*eos=*/true, /*chat=*/false);
    EXPECT_EQ(c.content, "<think>raw text</think> stays");
    EXPECT_EQ(c.body["choices"][0]["text"], "<think>raw text</think> stays");
    EXPECT_EQ(c.body["object"], "text_completion");
    EXPECT_EQ(c.body["choices"][0]["logprobs"]["tokens"].size(), c.body["usage"]["completion_tokens"]);
}
