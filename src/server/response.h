// Turns one request's token events into OpenAI responses: SSE chunks while streaming, or the whole
// chat.completion / text_completion object at the end. Both paths run the same decoder and parsers, so a
// stream concatenates to exactly the non-streamed answer. Formatting happens here, on the HTTP thread.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/output_parser.h"
#include "server/prompt.h"
#include "server/queue.h"
#include "server/request.h"
#include "tokenizer/tokenizer.h"

namespace grimoire::server {

struct ResponseMeta {
    bool chat = true;
    std::string id;           // chatcmpl-... / cmpl-...
    int64_t created = 0;      // unix seconds
    std::string model;        // the served name the client asked for
    std::string fingerprint;  // system_fingerprint
};

class ResponseBuilder {
public:
    ResponseBuilder(const Tokenizer& tok, const Prepared& prep, const GenerationParams& gen, ResponseMeta meta);

    // Consumes a batch of token events; returns the chunks to send now (at most one; none while the parsers
    // hold text back). After a stop string matched, done() is true and later tokens are ignored.
    std::vector<ojson> on_tokens(const std::vector<TokenEvent>& events);
    // Ends the response: the last text, the chunk with finish_reason, and the usage chunk when asked for.
    std::vector<ojson> on_finish(const FinishEvent& fin);
    bool done() const { return parser_.stopped(); }

    ojson full_response() const;  // after on_finish: the non-streaming body
    int64_t completion_tokens() const { return n_tokens_; }
    const std::string& finish_reason() const { return finish_reason_; }

    static std::string sse(const ojson& chunk);

private:
    ojson chunk(const OutputDelta& d, const ojson& logprobs, const std::vector<int32_t>& ids,
                const ojson& finish) const;
    ojson logprob_entries(const std::vector<TokenEvent>& events) const;
    std::string token_text(int32_t prev, int32_t id) const;
    ojson usage() const;
    void accumulate(const OutputDelta& d);

    const Tokenizer& tok_;
    GenerationParams gen_;
    ResponseMeta meta_;
    int64_t prompt_tokens_;
    int32_t last_prompt_id_;
    std::vector<int32_t> stop_ids_;
    StreamDecoder decoder_;
    OutputParser parser_;

    bool role_sent_ = false;
    bool first_text_ = true;
    int64_t n_tokens_ = 0;
    std::vector<int32_t> all_ids_;
    std::vector<TokenEvent> lp_all_;        // for non-streaming logprobs
    std::vector<int32_t> lp_prev_;          // the token before each logprob entry (for its text)
    std::vector<int32_t> pending_ids_;      // token ids not yet attached to a chunk
    std::vector<TokenEvent> pending_lp_;
    OutputDelta total_;
    int n_calls_sent_ = 0;
    std::string finish_reason_;
};

// "chatcmpl-" / "cmpl-" + 24 random hex digits.
std::string new_response_id(bool chat);

}  // namespace grimoire::server
