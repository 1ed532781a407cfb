// Chat templates: renders a checkpoint's Jinja chat template exactly as transformers' apply_chat_template does
// (jinja2 3.1.6 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson,
// raise_exception, strftime_now), using the interpreter in tokenizer/jinja/.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace grimoire {

namespace jinja {
struct Template;
}

class ChatTemplate {
public:
    // Parses now; throws Error with line/column on a syntax or unsupported-construct error (load time), so a
    // template the interpreter cannot run is refused before it can produce a wrong prompt.
    explicit ChatTemplate(std::string source);
    ~ChatTemplate();
    ChatTemplate(ChatTemplate&&) noexcept;
    ChatTemplate& operator=(ChatTemplate&&) noexcept;

    // context keys: messages, tools (optional), add_generation_prompt, bos_token, eos_token, and any
    // chat_template_kwargs key (e.g. enable_thinking). Missing `tools`/`documents` are passed as none and a
    // missing add_generation_prompt as false, as transformers does; a message's reasoning is aliased to both
    // `reasoning_content` and `thinking` as transformers does. Throws Error on raise_exception / runtime errors.
    //
    // Prefer the ordered_json overload: Python dicts keep insertion order, so `tools | tojson` renders the
    // schema keys in the client's order only when the request was parsed into an ordered_json. A plain json
    // (keys sorted by std::map) renders keys sorted.
    std::string render(const nlohmann::ordered_json& context) const;
    std::string render(const nlohmann::json& context) const;

    const std::string& source() const { return source_; }

private:
    std::string source_;
    std::unique_ptr<jinja::Template> tmpl_;
};

}  // namespace grimoire
