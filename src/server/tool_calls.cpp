#include "server/tool_calls.h"

#include <random>
#include <utility>

#include "server/stop_matcher.h"
#include "server/text_util.h"

namespace grimoire::server {

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

std::string new_call_id() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
    return id;
}

bool parse_hermes(std::string_view body, ToolCall& call) {
    auto j = nlohmann::ordered_json::parse(strip_space(body), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    call.name = j["name"].get<std::string>();
    if (call.name.empty()) return false;
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    for (const char* key : {"arguments", "parameters"}) {
        if (!j.contains(key)) continue;
        args = j[key];
        // Some models write the arguments as a JSON string holding the object.
        if (args.is_string()) args = nlohmann::ordered_json::parse(args.get<std::string>(), nullptr, false);
        break;
    }
    if (!args.is_object()) return false;
    call.arguments = args.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    return true;
}

// The JSON-schema type of parameter `param` of function `fn` in the request's tools ("" when unknown).
std::string param_type(const nlohmann::ordered_json& tools, const std::string& fn, const std::string& param) {
    if (!tools.is_array()) return "";
    for (const auto& t : tools) {
        const nlohmann::ordered_json* f = t.contains("function") ? &t["function"] : &t;
        if (!f->is_object() || f->value("name", "") != fn) continue;
        const auto props = f->value("parameters", nlohmann::ordered_json::object()).value("properties", nlohmann::ordered_json());
        if (!props.is_object() || !props.contains(param) || !props[param].is_object()) return "";
        const auto& ty = props[param].value("type", nlohmann::ordered_json());
        if (ty.is_string()) return ty.get<std::string>();
        // ["integer", "null"] style unions: the first non-null type decides.
        if (ty.is_array())
            for (const auto& x : ty)
                if (x.is_string() && x != "null") return x.get<std::string>();
        return "";
    }
    return "";
}

// One XML parameter value, typed by its schema: strings stay strings; numbers, booleans, objects and arrays
// are parsed as JSON when they parse, else kept as the string the model wrote.
nlohmann::ordered_json typed_value(std::string_view raw, const std::string& type) {
    std::string_view v = raw;
    if (v.starts_with('\n')) v.remove_prefix(1);
    if (v.ends_with('\n')) v.remove_suffix(1);
    if (type.empty() || type == "string") return std::string(v);
    auto j = nlohmann::ordered_json::parse(strip_space(v), nullptr, false);
    if (j.is_discarded()) return std::string(v);
    return j;
}

bool parse_xml(std::string_view body, const nlohmann::ordered_json& tools, ToolCall& call) {
    std::string_view s = strip_space(body);
    constexpr std::string_view kFn = "<function=", kFnEnd = "</function>", kP = "<parameter=",
                               kPEnd = "</parameter>";
    if (!s.starts_with(kFn)) return false;
    const size_t gt = s.find('>');
    if (gt == std::string_view::npos) return false;
    call.name = std::string(strip_space(s.substr(kFn.size(), gt - kFn.size())));
    if (call.name.empty() || call.name.find('<') != std::string::npos) return false;
    s.remove_prefix(gt + 1);
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    for (;;) {
        s = s.substr(leading_space(s));
        if (s.starts_with(kFnEnd)) {
            if (!strip_space(s.substr(kFnEnd.size())).empty()) return false;  // junk after </function>
            break;
        }
        if (!s.starts_with(kP)) return false;
        const size_t pgt = s.find('>');
        if (pgt == std::string_view::npos) return false;
        const std::string pname(strip_space(s.substr(kP.size(), pgt - kP.size())));
        if (pname.empty() || pname.find('<') != std::string::npos) return false;
        s.remove_prefix(pgt + 1);
        // The value ends at </parameter>; models sometimes omit it before the next parameter or </function>.
        size_t end = s.find(kPEnd), skip = kPEnd.size();
        for (std::string_view next : {kP, kFnEnd}) {
            const size_t n = s.find(next);
            if (n < end) end = n, skip = 0;
        }
        if (end == std::string_view::npos) return false;
        args[pname] = typed_value(s.substr(0, end), param_type(tools, call.name, pname));
        s.remove_prefix(end + skip);
    }
    call.arguments = args.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    return true;
}

}  // namespace

ToolFormat tool_format_for_template(std::string_view src) {
    return src.find("<function=") != std::string_view::npos ? ToolFormat::XML : ToolFormat::HERMES_JSON;
}

std::string tool_call_prefill(ToolFormat format, const std::string& name) {
    std::string s = std::string(kOpen) + "\n";
    if (name.empty()) return s;
    if (format == ToolFormat::XML) return s + "<function=" + name + ">\n";
    return s + "{\"name\": " + nlohmann::ordered_json(name).dump() + ", \"arguments\": ";
}

ToolCallParser::ToolCallParser(ToolFormat format, nlohmann::ordered_json tools) : format_(format), tools_(std::move(tools)) {}

bool ToolCallParser::parse_body(std::string_view body, ToolCall& call) const {
    const bool ok = format_ == ToolFormat::XML ? parse_xml(body, tools_, call) : parse_hermes(body, call);
    if (ok) call.id = new_call_id();
    return ok;
}

ToolDelta ToolCallParser::push(std::string_view text) {
    ToolDelta out;
    if (format_ == ToolFormat::NONE) {
        out.content = text;
        return out;
    }
    buf_.append(text);
    run(out, false);
    return out;
}

ToolDelta ToolCallParser::flush() {
    ToolDelta out;
    if (format_ == ToolFormat::NONE) return out;
    run(out, true);
    return out;
}

void ToolCallParser::emit_text(ToolDelta& out, std::string_view text, bool final) {
    // Whitespace-only runs are held: between or after calls they are layout, not content.
    pending_space_.append(text);
    if (strip_space(pending_space_).empty()) {
        if (final && n_calls_ == 0) out.content += std::exchange(pending_space_, {});
        return;
    }
    // Hold trailing whitespace: it may be the gap before a call.
    const std::string_view keep = rstrip_space(pending_space_);
    out.content.append(keep);
    pending_space_.erase(0, keep.size());
    if (final && n_calls_ == 0) out.content += std::exchange(pending_space_, {});
}

void ToolCallParser::run(ToolDelta& out, bool final) {
    for (;;) {
        if (!in_call_) {
            const size_t open = buf_.find(kOpen);
            if (open != std::string::npos) {
                emit_text(out, std::string_view(buf_).substr(0, open), false);
                buf_.erase(0, open + kOpen.size());
                in_call_ = true;
                continue;
            }
            const size_t hold = final ? 0 : partial_suffix(buf_, kOpen);
            emit_text(out, std::string_view(buf_).substr(0, buf_.size() - hold), final);
            buf_.erase(0, buf_.size() - hold);
            return;
        }
        const size_t close = buf_.find(kClose);
        if (close == std::string::npos) {
            if (final) {  // never closed: the model ran out of tokens mid-call; give back the text
                std::string text = std::string(kOpen) + buf_;
                buf_.clear();
                in_call_ = false;
                out.content += std::exchange(pending_space_, {});
                out.content += text;
            }
            return;
        }
        ToolCall call;
        if (parse_body(std::string_view(buf_).substr(0, close), call)) {
            pending_space_.clear();
            out.calls.push_back(std::move(call));
            ++n_calls_;
        } else {
            out.content += std::exchange(pending_space_, {});
            out.content += std::string(kOpen) + buf_.substr(0, close + kClose.size());
        }
        buf_.erase(0, close + kClose.size());
        in_call_ = false;
    }
}

}  // namespace grimoire::server
