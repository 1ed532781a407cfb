#include "server/prompt.h"

#include "server/api_error.h"
#include "server/text_util.h"

namespace grimoire::server {

PromptBuilder::PromptBuilder(const Tokenizer& tok, int64_t ctx) : tok_(tok), ctx_(ctx) {
    const std::string& src = tok.chat_template();
    if (src.empty()) return;
    tmpl_ = std::make_unique<ChatTemplate>(src);
    template_thinks_ = src.find("<think>") != std::string::npos;
    // A chat turn ends with the template's end-of-turn token, which is not always the tokenizer's EOS (a base
    // tokenizer config with a ChatML template): stop on those the template writes.
    for (const char* t : {"<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "<|return|>", "<end_of_turn>"}) {
        const int32_t id = tok.token_to_id(t);
        if (id >= 0 && src.find(t) != std::string::npos) turn_end_ids_.push_back(id);
    }
}

std::string PromptBuilder::render(const ChatRequest& r, const std::string& prefill) const {
    if (!tmpl_)
        throw bad_request("This model has no chat template; use /v1/completions with a prompt", "messages");
    ojson ctx = ojson::object();
    // chat_template_kwargs first, so the fixed keys below win over a client that sends e.g. `messages` in it.
    for (auto it = r.chat_template_kwargs.begin(); it != r.chat_template_kwargs.end(); ++it) ctx[it.key()] = it.value();
    ctx["messages"] = r.messages;
    if (!r.tools.is_null()) ctx["tools"] = r.tools;
    ctx["add_generation_prompt"] = r.add_generation_prompt;
    ctx["bos_token"] = tok_.bos_token();
    ctx["eos_token"] = tok_.eos_token();
    try {
        return tmpl_->render(ctx) + prefill;
    } catch (const Error& e) {
        throw bad_request(std::string("The chat template could not render these messages: ") + e.what(), "messages");
    }
}

std::vector<int32_t> PromptBuilder::tokenize_text(const std::string& text, bool add_special) const {
    std::vector<int32_t> ids;
    if (add_special && tok_.add_bos() && tok_.bos_id() >= 0) ids.push_back(tok_.bos_id());
    const auto body = tok_.encode(text, /*parse_special=*/true);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
}

void PromptBuilder::resolve_length(const GenerationParams& g, Prepared& p) const {
    const int64_t n = int64_t(p.prompt.size());
    if (n == 0) throw bad_request("The prompt is empty", "prompt");
    if (n >= ctx_)
        throw bad_request("The prompt is " + std::to_string(n) + " tokens; this server's context is " +
                              std::to_string(ctx_) + " tokens (--ctx), which leaves no room to generate",
                          "messages");
    if (g.max_tokens && n + *g.max_tokens > ctx_)
        throw bad_request("max_tokens " + std::to_string(*g.max_tokens) + " plus the prompt's " + std::to_string(n) +
                              " tokens exceeds this server's context of " + std::to_string(ctx_) + " tokens",
                          "max_tokens");
    p.max_tokens = g.max_tokens.value_or(ctx_ - n);
    p.output.stop = g.stop;
    if (tok_.eos_id() >= 0) p.stop_ids.push_back(tok_.eos_id());
}

Prepared PromptBuilder::chat(const ChatRequest& r) const {
    Prepared p;
    OutputOptions& o = p.output;
    const bool tools_on = !r.tools.is_null() && r.tool_choice != ToolChoice::NONE;
    std::string prompt = render(r);
    const std::string_view head = rstrip_space(prompt);
    o.reasoning = template_thinks_;
    o.reasoning_open = template_thinks_ && head.ends_with("<think>");
    if (tools_on) {
        o.tools = tool_format_for_template(tmpl_->source());
        o.tool_defs = r.tools;
        if (r.tool_choice == ToolChoice::REQUIRED || r.tool_choice == ToolChoice::NAMED) {
            // Forcing a call without constrained decoding: write the opening of the call for the model. An
            // open reasoning block is closed first (the answer is the call).
            o.prefill = (o.reasoning_open ? "</think>\n\n" : "") + tool_call_prefill(o.tools, r.tool_name);
            prompt += o.prefill;
        }
    }
    p.prompt = tokenize_text(prompt, /*add_special=*/false);  // the template writes BOS itself
    resolve_length(r.gen, p);
    p.stop_ids.insert(p.stop_ids.end(), turn_end_ids_.begin(), turn_end_ids_.end());
    return p;
}

Prepared PromptBuilder::completion(const CompletionRequest& r) const {
    Prepared p;
    if (r.prompt_text) {
        p.prompt = tokenize_text(*r.prompt_text, /*add_special=*/true);
    } else {
        for (int32_t id : r.prompt_ids)
            if (id >= tok_.vocab_size())
                throw bad_request("Token id " + std::to_string(id) + " is out of the vocabulary (size " +
                                      std::to_string(tok_.vocab_size()) + ")",
                                  "prompt");
        p.prompt = r.prompt_ids;
    }
    resolve_length(r.gen, p);
    return p;
}

}  // namespace grimoire::server
