#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"

namespace grimoire {

ChatTemplate::ChatTemplate(std::string source) : source_(std::move(source)) {
    try {
        tmpl_ = jinja::parse(source_);
    } catch (const Error& e) {
        throw Error(std::string("chat template: ") + e.what());
    }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

namespace {

// transformers copies a message's reasoning under every name templates read it by:
// {"thinking": r, **message, "reasoning_content": r}, r = the first non-null of these fields.
jinja::Value alias_reasoning(const jinja::Value& msg) {
    using jinja::Value;
    if (msg.kind != jinja::Kind::Dict) return msg;
    const Value* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
        const Value* v = msg.find(key);
        if (v && !v->is_none()) {
            reasoning = v;
            break;
        }
    }
    if (!reasoning) return msg;
    jinja::Dict d;
    d.emplace_back(Value::string("thinking"), *reasoning);
    auto put = [&](const Value& k, const Value& v) {
        for (auto& [k2, v2] : d)
            if (jinja::equals(k2, k)) {
                v2 = v;
                return;
            }
        d.emplace_back(k, v);
    };
    for (const auto& [k, v] : *msg.dict) put(k, v);
    put(Value::string("reasoning_content"), *reasoning);
    return Value::make_dict(std::move(d));
}

}  // namespace

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
    if (!context.is_object()) throw Error("chat template: the render context must be a JSON object");
    std::unordered_map<std::string, jinja::Value> vars;
    // transformers always passes these, as None / False when the request has none.
    vars["tools"] = jinja::Value::none();
    vars["documents"] = jinja::Value::none();
    vars["add_generation_prompt"] = jinja::Value::boolean(false);
    for (auto it = context.begin(); it != context.end(); ++it) vars[it.key()] = jinja::from_json(it.value());
    auto m = vars.find("messages");
    if (m != vars.end() && m->second.kind == jinja::Kind::List) {
        jinja::List msgs;
        for (const auto& msg : *m->second.list) msgs.push_back(alias_reasoning(msg));
        m->second = jinja::Value::make_list(std::move(msgs));
    }
    try {
        return jinja::render(*tmpl_, vars);
    } catch (const jinja::TemplateRaise&) {
        throw;
    } catch (const Error& e) {
        throw Error(std::string("chat template: ") + e.what());
    }
}

std::string ChatTemplate::render(const nlohmann::json& context) const {
    return render(nlohmann::ordered_json::parse(context.dump()));
}

}  // namespace grimoire
