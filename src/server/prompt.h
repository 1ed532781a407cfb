// From a validated request to what the engine runs: the chat template rendered (with tools, the generation
// prompt and chat_template_kwargs), tokenised, checked against the context, plus the options of the output
// parsers (reasoning, tool-call format, stop strings, tool_choice prefill). Runs on HTTP threads; the Tokenizer
// and ChatTemplate are immutable and shared.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/output_parser.h"
#include "server/request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace grimoire::server {

struct Prepared {
    std::vector<int32_t> prompt;   // token ids the engine runs
    int64_t max_tokens = 0;        // resolved against the context
    OutputOptions output;
    std::vector<int32_t> stop_ids; // end-of-turn ids besides the model's EOS ids
};

class PromptBuilder {
public:
    // Parses the tokenizer's chat template now: one the interpreter cannot run fails here (Error), at start-up.
    PromptBuilder(const Tokenizer& tok, int64_t ctx);

    bool has_template() const { return tmpl_ != nullptr; }
    const Tokenizer& tokenizer() const { return tok_; }
    int64_t ctx() const { return ctx_; }

    // The rendered prompt text (throws ApiError 400 for a template error or a model without a template).
    std::string render(const ChatRequest& r, const std::string& prefill = "") const;
    std::vector<int32_t> tokenize_text(const std::string& text, bool add_special) const;

    Prepared chat(const ChatRequest& r) const;
    Prepared completion(const CompletionRequest& r) const;

private:
    void resolve_length(const GenerationParams& g, Prepared& p) const;

    const Tokenizer& tok_;
    int64_t ctx_;
    std::unique_ptr<ChatTemplate> tmpl_;
    bool template_thinks_ = false;           // the template knows <think>
    std::vector<int32_t> turn_end_ids_;      // end-of-turn tokens the template writes
};

}  // namespace grimoire::server
