#include "server/response.h"

#include <algorithm>
#include <random>

namespace grimoire::server {

namespace {

ojson bytes_of(const std::string& s) {
    ojson b = ojson::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
}

ojson tool_call_json(const ToolCall& c, int index) {
    return {{"index", index},
            {"id", c.id},
            {"type", "function"},
            {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

}  // namespace

std::string new_response_id(bool chat) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id = chat ? "chatcmpl-" : "cmpl-";
    for (int i = 0; i < 24; ++i) id += kHex[rng() % 16];
    return id;
}

ResponseBuilder::ResponseBuilder(const Tokenizer& tok, const Prepared& prep, const GenerationParams& gen,
                                 ResponseMeta meta)
    : tok_(tok), gen_(gen), meta_(std::move(meta)), prompt_tokens_(int64_t(prep.prompt.size())),
      last_prompt_id_(prep.prompt.empty() ? -1 : prep.prompt.back()),
      stop_ids_(prep.stop_ids), decoder_(tok), parser_(prep.output) {}

std::string ResponseBuilder::sse(const ojson& chunk) {
    return "data: " + chunk.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

// A token's text as it reads after `prev`: decoding it alone would drop a SentencePiece leading space.
std::string ResponseBuilder::token_text(int32_t prev, int32_t id) const {
    if (prev < 0) return tok_.decode(std::span<const int32_t>(&id, 1));
    const int32_t pair[2] = {prev, id};
    const std::string a = tok_.decode(std::span<const int32_t>(pair, 1));
    const std::string b = tok_.decode(std::span<const int32_t>(pair, 2));
    if (b.size() >= a.size() && b.compare(0, a.size(), a) == 0) return b.substr(a.size());
    return tok_.decode(std::span<const int32_t>(&id, 1));
}

ojson ResponseBuilder::logprob_entries(const std::vector<TokenEvent>& events) const {
    // The entries are the last events.size() of lp_all_; their predecessors are in lp_prev_ at the same index.
    const size_t base = lp_prev_.size() - events.size();
    ojson content = ojson::array(), tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(),
          offs = ojson::array();
    for (size_t i = 0; i < events.size(); ++i) {
        const TokenEvent& e = events[i];
        const int32_t prev = lp_prev_[base + i];
        const std::string t = token_text(prev, e.id);
        if (meta_.chat) {
            ojson top = ojson::array();
            for (const auto& [id, lp] : e.top) {
                const std::string tt = token_text(prev, id);
                top.push_back({{"token", tt}, {"logprob", lp}, {"bytes", bytes_of(tt)}});
            }
            content.push_back({{"token", t}, {"logprob", e.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
        } else {
            tokens.push_back(t);
            lps.push_back(e.logprob);
            ojson top = ojson::object();
            for (const auto& [id, lp] : e.top) top[token_text(prev, id)] = lp;
            tops.push_back(top);
            offs.push_back(0);
        }
    }
    if (meta_.chat) return {{"content", content}, {"refusal", nullptr}};
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

ojson ResponseBuilder::usage() const {
    return {{"prompt_tokens", prompt_tokens_},
            {"completion_tokens", n_tokens_},
            {"total_tokens", prompt_tokens_ + n_tokens_}};
}

ojson ResponseBuilder::chunk(const OutputDelta& d, const ojson& logprobs, const std::vector<int32_t>& ids,
                             const ojson& finish) const {
    ojson choice = ojson::object();
    choice["index"] = 0;
    if (meta_.chat) {
        ojson delta = ojson::object();
        if (!role_sent_) delta["role"] = "assistant";
        if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
        if (!d.content.empty()) delta["content"] = d.content;
        if (!d.calls.empty()) {
            ojson calls = ojson::array();
            for (size_t i = 0; i < d.calls.size(); ++i) calls.push_back(tool_call_json(d.calls[i], n_calls_sent_ + int(i)));
            delta["tool_calls"] = calls;
        }
        choice["delta"] = delta;
    } else {
        choice["text"] = d.content;
    }
    choice["logprobs"] = logprobs;
    choice["finish_reason"] = finish;
    if (gen_.return_token_ids) choice["token_ids"] = ids;
    ojson c = {{"id", meta_.id},
               {"object", meta_.chat ? "chat.completion.chunk" : "text_completion"},
               {"created", meta_.created},
               {"model", meta_.model},
               {"system_fingerprint", meta_.fingerprint},
               {"choices", ojson::array({choice})}};
    if (gen_.include_usage) c["usage"] = nullptr;
    return c;
}

void ResponseBuilder::accumulate(const OutputDelta& d) {
    OutputDelta copy = d;
    total_.append(std::move(copy));
}

std::vector<ojson> ResponseBuilder::on_tokens(const std::vector<TokenEvent>& events) {
    OutputDelta d;
    for (const auto& e : events) {
        if (parser_.stopped()) break;  // text after a stop string is not part of the answer
        ++n_tokens_;
        all_ids_.push_back(e.id);
        pending_ids_.push_back(e.id);
        if (gen_.logprobs) {
            pending_lp_.push_back(e);
            lp_prev_.push_back(all_ids_.size() >= 2 ? all_ids_[all_ids_.size() - 2] : last_prompt_id_);
        }
        // End-of-turn tokens end generation; their text is never part of the answer.
        if (std::find(stop_ids_.begin(), stop_ids_.end(), e.id) != stop_ids_.end()) continue;
        std::string text = decoder_.push(e.id);
        if (first_text_ && !text.empty()) {
            // The decoder starts fresh, so it drops a SentencePiece leading space that the same token has
            // after the prompt ("Once" -> " upon"): take the token's text in context for the first piece.
            first_text_ = false;
            const std::string in_ctx = token_text(last_prompt_id_, e.id);
            if (in_ctx.size() > text.size() && in_ctx.ends_with(text)) text = in_ctx;
        }
        d.append(parser_.push(text));
    }
    accumulate(d);
    if (d.empty()) return {};
    if (gen_.logprobs) lp_all_.insert(lp_all_.end(), pending_lp_.begin(), pending_lp_.end());
    ojson c = chunk(d, gen_.logprobs ? logprob_entries(pending_lp_) : ojson(nullptr), pending_ids_, nullptr);
    role_sent_ = true;
    n_calls_sent_ += int(d.calls.size());
    pending_ids_.clear();
    pending_lp_.clear();
    return {c};
}

std::vector<ojson> ResponseBuilder::on_finish(const FinishEvent& fin) {
    OutputDelta d;
    if (!parser_.stopped()) d.append(parser_.push(decoder_.flush()));
    d.append(parser_.finish());
    accumulate(d);
    if (gen_.logprobs) lp_all_.insert(lp_all_.end(), pending_lp_.begin(), pending_lp_.end());

    if (parser_.tool_calls() > 0) finish_reason_ = "tool_calls";
    else if (parser_.stopped()) finish_reason_ = "stop";
    else if (fin.reason == "length") finish_reason_ = "length";
    else finish_reason_ = "stop";  // EOS / end of turn; "cancelled" only reaches a client that is gone

    std::vector<ojson> out;
    const ojson lp = gen_.logprobs && !pending_lp_.empty() ? logprob_entries(pending_lp_) : ojson(nullptr);
    if (!d.empty()) {
        out.push_back(chunk(d, lp, pending_ids_, finish_reason_));
    } else {
        // The finish chunk carries no text, but any tokens not yet reported (e.g. the EOS) ride along.
        out.push_back(chunk(OutputDelta{}, lp, pending_ids_, finish_reason_));
        if (meta_.chat && role_sent_) out.back()["choices"][0]["delta"] = ojson::object();
    }
    role_sent_ = true;
    pending_ids_.clear();
    pending_lp_.clear();
    if (gen_.include_usage) {
        ojson u = {{"id", meta_.id},
                   {"object", meta_.chat ? "chat.completion.chunk" : "text_completion"},
                   {"created", meta_.created},
                   {"model", meta_.model},
                   {"system_fingerprint", meta_.fingerprint},
                   {"choices", ojson::array()},
                   {"usage", usage()}};
        out.push_back(std::move(u));
    }
    return out;
}

ojson ResponseBuilder::full_response() const {
    ojson choice = ojson::object();
    choice["index"] = 0;
    if (meta_.chat) {
        ojson msg = ojson::object();
        msg["role"] = "assistant";
        msg["content"] = total_.content.empty() && !total_.calls.empty() ? ojson(nullptr) : ojson(total_.content);
        msg["reasoning_content"] = total_.reasoning.empty() ? ojson(nullptr) : ojson(total_.reasoning);
        if (!total_.calls.empty()) {
            ojson calls = ojson::array();
            for (size_t i = 0; i < total_.calls.size(); ++i) {
                ojson c = tool_call_json(total_.calls[i], int(i));
                c.erase("index");
                calls.push_back(std::move(c));
            }
            msg["tool_calls"] = calls;
        }
        choice["message"] = msg;
    } else {
        choice["text"] = total_.content;
    }
    choice["logprobs"] = gen_.logprobs ? logprob_entries(lp_all_) : ojson(nullptr);
    choice["finish_reason"] = finish_reason_;
    if (gen_.return_token_ids) choice["token_ids"] = all_ids_;
    return {{"id", meta_.id},
            {"object", meta_.chat ? "chat.completion" : "text_completion"},
            {"created", meta_.created},
            {"model", meta_.model},
            {"system_fingerprint", meta_.fingerprint},
            {"choices", ojson::array({choice})},
            {"usage", usage()}};
}

}  // namespace grimoire::server
