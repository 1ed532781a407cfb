#include "server/request.h"

#include <cmath>
#include <limits>

#include "server/api_error.h"

namespace grimoire::server {

namespace {

// Typed, range-checked reads of one JSON object; `path` prefixes the field name in messages and `param`.
class Fields {
public:
    Fields(const ojson& j, std::string path = "") : j_(j), path_(std::move(path)) {}

    const ojson* get(const std::string& key) const {
        auto it = j_.find(key);
        return it == j_.end() || it->is_null() ? nullptr : &*it;
    }
    std::string name(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw bad_request("`" + name(key) + "` " + what, name(key));
    }

    std::optional<bool> boolean(const std::string& key) const {
        const ojson* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_boolean()) fail(key, "must be a boolean, got " + v->dump());
        return v->get<bool>();
    }
    std::optional<int64_t> integer(const std::string& key, int64_t lo, int64_t hi) const {
        const ojson* v = get(key);
        if (!v) return std::nullopt;
        int64_t x = 0;
        if (v->is_number_integer()) {
            if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
                fail(key, "is out of range: " + v->dump());
            x = v->get<int64_t>();
        } else if (v->is_number_float()) {
            // 16.0 is an integer to Python clients; 16.5 is not.
            const double d = v->get<double>();
            if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18)
                fail(key, "must be an integer, got " + v->dump());
            x = int64_t(d);
        } else {
            fail(key, "must be an integer, got " + v->dump());
        }
        if (x < lo || x > hi)
            fail(key, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                          std::to_string(x));
        return x;
    }
    std::optional<double> number(const std::string& key, double lo, double hi) const {
        const ojson* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_number()) fail(key, "must be a number, got " + v->dump());
        const double x = v->get<double>();
        if (!std::isfinite(x) || x < lo || x > hi)
            fail(key, "must be between " + fmt(lo) + " and " + fmt(hi) + ", got " + v->dump());
        return x;
    }
    std::optional<std::string> string(const std::string& key) const {
        const ojson* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_string()) fail(key, "must be a string, got " + v->dump());
        return v->get<std::string>();
    }

private:
    static std::string fmt(double x) {
        std::string s = std::to_string(x);
        while (s.size() > 1 && s.back() == '0') s.pop_back();
        if (s.back() == '.') s.pop_back();
        return s;
    }
    const ojson& j_;
    std::string path_;
};

constexpr int64_t kMaxTokensLimit = int64_t(1) << 40;  // "huge" is caught against the context later
constexpr int kMaxTopLogprobs = 20;

void parse_stop(const Fields& f, GenerationParams& g) {
    const ojson* v = f.get("stop");
    if (!v) return;
    if (v->is_string()) {
        if (!v->get<std::string>().empty()) g.stop.push_back(v->get<std::string>());
        return;
    }
    if (!v->is_array()) f.fail("stop", "must be a string or an array of strings");
    if (v->size() > 16) f.fail("stop", "may hold at most 16 strings");
    for (const auto& s : *v) {
        if (!s.is_string()) f.fail("stop", "must be a string or an array of strings, got " + s.dump());
        if (!s.get<std::string>().empty()) g.stop.push_back(s.get<std::string>());
    }
}

// Fields common to both generation endpoints. `chat` selects the logprobs convention: a boolean plus
// top_logprobs for chat, an integer count for completions.
GenerationParams parse_generation(const Fields& f, bool chat) {
    GenerationParams g;
    if (auto n = f.integer("n", 1, 128); n && *n != 1)
        f.fail("n", "must be 1: this server returns one choice per request");
    auto mt = f.integer("max_tokens", 1, kMaxTokensLimit);
    if (auto mct = f.integer("max_completion_tokens", 1, kMaxTokensLimit)) mt = mct;
    g.max_tokens = mt;

    SamplingParams& s = g.sampling;
    s.temperature = float(f.number("temperature", 0.0, 100.0).value_or(1.0));
    s.top_p = float(f.number("top_p", 0.0, 1.0).value_or(1.0));
    if (s.top_p <= 0.0f) f.fail("top_p", "must be greater than 0");
    const int64_t top_k = f.integer("top_k", -1, std::numeric_limits<int32_t>::max()).value_or(0);
    s.top_k = top_k < 0 ? 0 : int(top_k);  // -1 is vLLM's "off"
    s.min_p = float(f.number("min_p", 0.0, 1.0).value_or(0.0));
    s.presence_penalty = float(f.number("presence_penalty", -2.0, 2.0).value_or(0.0));
    s.frequency_penalty = float(f.number("frequency_penalty", -2.0, 2.0).value_or(0.0));
    s.repetition_penalty = float(f.number("repetition_penalty", 0.0, 100.0).value_or(1.0));
    if (s.repetition_penalty <= 0.0f) f.fail("repetition_penalty", "must be greater than 0");
    if (auto seed = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
        s.seed = uint64_t(*seed);
        s.has_seed = true;
    }

    parse_stop(f, g);
    g.stream = f.boolean("stream").value_or(false);
    if (const ojson* so = f.get("stream_options")) {
        if (!so->is_object()) f.fail("stream_options", "must be an object");
        g.include_usage = Fields(*so, "stream_options").boolean("include_usage").value_or(false);
    }
    if (chat) {
        g.logprobs = f.boolean("logprobs").value_or(false);
        g.top_logprobs = int(f.integer("top_logprobs", 0, kMaxTopLogprobs).value_or(0));
        if (g.top_logprobs > 0 && !g.logprobs) f.fail("top_logprobs", "requires `logprobs` to be true");
    } else if (auto lp = f.integer("logprobs", 0, kMaxTopLogprobs)) {
        g.logprobs = true;
        g.top_logprobs = int(*lp);
    }
    g.ignore_eos = f.boolean("ignore_eos").value_or(false);
    g.min_tokens = f.integer("min_tokens", 0, kMaxTokensLimit).value_or(0);
    if (g.max_tokens && g.min_tokens > *g.max_tokens)
        f.fail("min_tokens", "must not exceed max_tokens (" + std::to_string(*g.max_tokens) + ")");
    g.return_token_ids = f.boolean("return_token_ids").value_or(false);

    if (const ojson* rf = f.get("response_format")) {
        if (!rf->is_object()) f.fail("response_format", "must be an object");
        const auto type = Fields(*rf, "response_format").string("type").value_or("text");
        if (type != "text")
            throw bad_request("`response_format` type \"" + type +
                                  "\" is not supported: this server has no constrained decoding yet; "
                                  "use \"text\" or leave it out",
                              "response_format");
    }
    return g;
}

// A message's content as the template sees it: a string (text parts joined by newlines), or null.
ojson normalise_content(const ojson& c, const std::string& path, bool may_be_null) {
    if (c.is_null()) {
        if (!may_be_null) throw bad_request("`" + path + "` is required", path);
        return nullptr;
    }
    if (c.is_string()) return c;
    if (!c.is_array()) throw bad_request("`" + path + "` must be a string or an array of content parts", path);
    std::string text;
    for (size_t i = 0; i < c.size(); ++i) {
        const std::string p = path + "[" + std::to_string(i) + "]";
        if (!c[i].is_object()) throw bad_request("`" + p + "` must be an object", p);
        Fields part(c[i], p);
        const auto type = part.string("type").value_or("");
        if (type != "text" && type != "input_text")
            throw bad_request("`" + p + ".type` \"" + type + "\" is not supported: only text parts are", p + ".type");
        const auto t = part.string("text");
        if (!t) part.fail("text", "is required");
        if (i) text += "\n";
        text += *t;
    }
    return text;
}

ojson parse_tool_calls(const ojson& calls, const std::string& path) {
    if (!calls.is_array()) throw bad_request("`" + path + "` must be an array", path);
    ojson out = ojson::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        const std::string p = path + "[" + std::to_string(i) + "]";
        if (!calls[i].is_object()) throw bad_request("`" + p + "` must be an object", p);
        ojson call = calls[i];
        Fields f(call, p);
        const ojson* fn = f.get("function");
        if (!fn || !fn->is_object()) f.fail("function", "must be an object with `name` and `arguments`");
        Fields ff(*fn, p + ".function");
        if (!ff.string("name")) ff.fail("name", "is required");
        // Templates iterate `arguments | items` or print `arguments | tojson`: give them the object, as
        // transformers users do, when the client sent the OpenAI JSON string.
        if (const ojson* args = ff.get("arguments"); args && args->is_string()) {
            auto parsed = ojson::parse(args->get<std::string>(), nullptr, false);
            if (parsed.is_object()) call["function"]["arguments"] = parsed;
        }
        out.push_back(std::move(call));
    }
    return out;
}

ojson parse_messages(const Fields& f) {
    const ojson* m = f.get("messages");
    if (!m) f.fail("messages", "is required");
    if (!m->is_array() || m->empty()) f.fail("messages", "must be a non-empty array");
    ojson out = ojson::array();
    for (size_t i = 0; i < m->size(); ++i) {
        const std::string p = "messages[" + std::to_string(i) + "]";
        if (!(*m)[i].is_object()) throw bad_request("`" + p + "` must be an object", p);
        ojson msg = (*m)[i];
        Fields mf(msg, p);
        const auto role = mf.string("role");
        if (!role) mf.fail("role", "is required");
        if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant" && *role != "tool")
            mf.fail("role", "must be one of system, developer, user, assistant, tool; got \"" + *role + "\"");
        const bool assistant = *role == "assistant";
        const ojson* tc = mf.get("tool_calls");
        if (tc && !assistant) mf.fail("tool_calls", "is only allowed on assistant messages");
        msg["content"] = normalise_content(msg.value("content", ojson()), p + ".content", assistant);
        if (tc) msg["tool_calls"] = parse_tool_calls(*tc, p + ".tool_calls");
        for (const char* k : {"reasoning_content", "reasoning", "name", "tool_call_id"})
            if (mf.get(k) && !mf.get(k)->is_string()) mf.fail(k, "must be a string");
        out.push_back(std::move(msg));
    }
    return out;
}

void parse_tools(const Fields& f, ChatRequest& r) {
    const ojson* t = f.get("tools");
    if (t) {
        if (!t->is_array()) f.fail("tools", "must be an array");
        for (size_t i = 0; i < t->size(); ++i) {
            const std::string p = "tools[" + std::to_string(i) + "]";
            if (!(*t)[i].is_object()) throw bad_request("`" + p + "` must be an object", p);
            Fields tf((*t)[i], p);
            if (tf.string("type").value_or("function") != "function")
                tf.fail("type", "must be \"function\"");
            const ojson* fn = tf.get("function");
            if (!fn || !fn->is_object()) tf.fail("function", "must be an object");
            Fields ff(*fn, p + ".function");
            if (ff.string("name").value_or("").empty()) ff.fail("name", "is required");
            if (const ojson* params = ff.get("parameters"); params && !params->is_object())
                ff.fail("parameters", "must be a JSON schema object");
        }
        if (!t->empty()) r.tools = *t;
    }
    const ojson* c = f.get("tool_choice");
    if (!c) return;
    if (c->is_string()) {
        const auto s = c->get<std::string>();
        if (s == "auto") r.tool_choice = ToolChoice::AUTO;
        else if (s == "none") r.tool_choice = ToolChoice::NONE;
        else if (s == "required") r.tool_choice = ToolChoice::REQUIRED;
        else f.fail("tool_choice", "must be \"auto\", \"none\", \"required\" or a named function");
    } else if (c->is_object()) {
        Fields cf(*c, "tool_choice");
        const ojson* fn = cf.get("function");
        if (!fn || !fn->is_object()) cf.fail("function", "must be an object with a `name`");
        r.tool_name = Fields(*fn, "tool_choice.function").string("name").value_or("");
        if (r.tool_name.empty()) throw bad_request("`tool_choice.function.name` is required", "tool_choice");
        r.tool_choice = ToolChoice::NAMED;
    } else {
        f.fail("tool_choice", "must be a string or an object");
    }
    if (r.tool_choice == ToolChoice::REQUIRED || r.tool_choice == ToolChoice::NAMED) {
        if (r.tools.is_null()) f.fail("tool_choice", "needs `tools`");
        if (r.tool_choice == ToolChoice::NAMED) {
            bool found = false;
            for (const auto& t : r.tools) found = found || t["function"]["name"] == r.tool_name;
            if (!found) f.fail("tool_choice", "names \"" + r.tool_name + "\", which is not in `tools`");
        }
    }
}

void parse_chat_options(const Fields& f, ChatRequest& r) {
    r.messages = parse_messages(f);
    parse_tools(f, r);
    if (const ojson* k = f.get("chat_template_kwargs")) {
        if (!k->is_object()) f.fail("chat_template_kwargs", "must be an object");
        r.chat_template_kwargs = *k;
    }
    r.add_generation_prompt = f.boolean("add_generation_prompt").value_or(true);
}

std::vector<int32_t> parse_ids(const ojson& v, const std::string& param) {
    std::vector<int32_t> ids;
    for (const auto& x : v) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<int32_t>::max())
            throw bad_request("`" + param + "` must hold non-negative token ids, got " + x.dump(), param);
        ids.push_back(int32_t(x.get<int64_t>()));
    }
    return ids;
}

}  // namespace

ojson parse_body(const std::string& body) {
    ojson j = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw bad_request("The request body is not valid JSON");
    if (!j.is_object()) throw bad_request("The request body must be a JSON object");
    return j;
}

ChatRequest parse_chat_request(const ojson& body) {
    Fields f(body);
    ChatRequest r;
    r.model = f.string("model").value_or("");
    parse_chat_options(f, r);
    r.gen = parse_generation(f, /*chat=*/true);
    return r;
}

CompletionRequest parse_completion_request(const ojson& body) {
    Fields f(body);
    CompletionRequest r;
    r.model = f.string("model").value_or("");
    const ojson* p = f.get("prompt");
    if (!p) f.fail("prompt", "is required");
    // A string, token ids, or a one-element batch of either; batches of several prompts are refused.
    const ojson* one = p;
    if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
        if (p->size() != 1) f.fail("prompt", "must hold one prompt: batches of prompts are not supported");
        one = &p->front();
    }
    if (one->is_string()) {
        r.prompt_text = one->get<std::string>();
    } else if (one->is_array() && !one->empty()) {
        r.prompt_ids = parse_ids(*one, "prompt");
    } else {
        f.fail("prompt", "must be a non-empty string or array of token ids");
    }
    if (f.boolean("echo").value_or(false)) f.fail("echo", "is not supported");
    r.gen = parse_generation(f, /*chat=*/false);
    return r;
}

TokenizeRequest parse_tokenize_request(const ojson& body) {
    Fields f(body);
    TokenizeRequest r;
    r.add_special_tokens = f.boolean("add_special_tokens").value_or(true);
    r.return_token_strs = f.boolean("return_token_strs").value_or(false);
    if (f.get("messages")) {
        ChatRequest c;
        c.model = f.string("model").value_or("");
        parse_chat_options(f, c);
        r.chat = std::move(c);
    } else if (auto p = f.string("prompt")) {
        r.prompt = *p;
    } else {
        f.fail("prompt", "or `messages` is required");
    }
    return r;
}

std::vector<int32_t> parse_detokenize_request(const ojson& body) {
    Fields f(body);
    const ojson* t = f.get("tokens");
    if (!t || !t->is_array()) f.fail("tokens", "must be an array of token ids");
    return parse_ids(*t, "tokens");
}

}  // namespace grimoire::server
