// Tokenizer::load: reads a Hugging Face tokenizer directory into Tokenizer::Impl.
//
// tokenizer.json sections understood (anything else is refused with the file and key named):
//   normalizer    NFC NFD NFKC NFKD Prepend Replace(String) Lowercase Strip Sequence
//   pre_tokenizer Split(String|Regex, any behavior, invert) ByteLevel Metaspace Sequence
//   model         BPE (byte-level, or character-level with byte_fallback / unk_token)
//   decoder       ByteLevel Replace(String) ByteFallback Fuse Strip Metaspace Sequence
//   post_processor only to infer add_bos when tokenizer_config.json does not say
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/config.h"
#include "tokenizer/tokenizer_impl.h"

namespace grimoire {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// "path: key: what" errors for one JSON file.
struct Ctx {
    std::string file;
    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw Error(file + ": " + key + ": " + what);
    }
    [[noreturn]] void unsupported(const std::string& key, const json& v) const {
        fail(key, v.dump() + " is not supported");
    }
    const json& need(const json& j, const std::string& name, const std::string& key) const {
        if (!j.is_object() || !j.contains(name)) fail(key + "." + name, "is required but missing");
        return j[name];
    }
    std::string str(const json& j, const std::string& name, const std::string& key) const {
        const json& v = need(j, name, key);
        if (!v.is_string()) fail(key + "." + name, v.dump() + " is not a string");
        return v.get<std::string>();
    }
    bool flag(const json& j, const std::string& name, bool dflt, const std::string& key) const {
        if (!j.is_object() || !j.contains(name) || j[name].is_null()) return dflt;
        if (!j[name].is_boolean()) fail(key + "." + name, j[name].dump() + " is not a boolean");
        return j[name].get<bool>();
    }
    int integer(const json& j, const std::string& name, const std::string& key) const {
        const json& v = need(j, name, key);
        if (!v.is_number_integer()) fail(key + "." + name, v.dump() + " is not an integer");
        return v.get<int>();
    }
    // {"String": s} or {"Regex": r}; returns true for a regex.
    bool pattern(const json& j, const std::string& key, std::string& out) const {
        const json& p = need(j, "pattern", key);
        if (p.is_object() && p.contains("String") && p["String"].is_string()) {
            out = p["String"].get<std::string>();
            return false;
        }
        if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
            out = p["Regex"].get<std::string>();
            return true;
        }
        unsupported(key + ".pattern", p);
    }
};

json read_json(const fs::path& p) { return ConfigReader::from_file(p.string()).json(); }

std::string type_of(const Ctx& c, const json& j, const std::string& key) {
    if (!j.is_object()) c.fail(key, j.dump() + " is not an object");
    return c.str(j, "type", key);
}

void parse_normalizer(const Ctx& c, const json& j, const std::string& key, Normalizer& out) {
    using K = Normalizer::Kind;
    const std::string t = type_of(c, j, key);
    if (t == "Sequence") {
        const json& list = c.need(j, "normalizers", key);
        for (size_t i = 0; i < list.size(); ++i)
            parse_normalizer(c, list[i], key + ".normalizers[" + std::to_string(i) + "]", out);
    } else if (t == "NFC" || t == "NFD" || t == "NFKC" || t == "NFKD") {
        out.add({t == "NFC" ? K::NFC : t == "NFD" ? K::NFD : t == "NFKC" ? K::NFKC : K::NFKD, "", ""});
    } else if (t == "Prepend") {
        out.add({K::Prepend, c.str(j, "prepend", key), ""});
    } else if (t == "Replace") {
        std::string pat;
        if (c.pattern(j, key, pat)) c.unsupported(key + ".pattern", j["pattern"]);
        out.add({K::Replace, pat, c.str(j, "content", key)});
    } else if (t == "Lowercase") {
        out.add({K::Lowercase, "", ""});
    } else if (t == "Strip") {
        Normalizer::Step s{K::Strip, "", ""};
        s.left = c.flag(j, "strip_left", false, key);
        s.right = c.flag(j, "strip_right", false, key);
        out.add(s);
    } else {
        c.unsupported(key + ".type", j["type"]);
    }
}

PreTokenizer::Behavior parse_behavior(const Ctx& c, const json& j, const std::string& key) {
    using B = PreTokenizer::Behavior;
    const std::string b = c.str(j, "behavior", key);
    if (b == "Removed") return B::Removed;
    if (b == "Isolated") return B::Isolated;
    if (b == "MergedWithPrevious") return B::MergedWithPrevious;
    if (b == "MergedWithNext") return B::MergedWithNext;
    if (b == "Contiguous") return B::Contiguous;
    c.unsupported(key + ".behavior", j["behavior"]);
}

// Returns true when a ByteLevel step was seen (the model then works on bytes).
bool parse_pretokenizer(const Ctx& c, const json& j, const std::string& key, PreTokenizer& out) {
    using S = PreTokenizer::Step;
    const std::string t = type_of(c, j, key);
    if (t == "Sequence") {
        bool byte_level = false;
        const json& list = c.need(j, "pretokenizers", key);
        for (size_t i = 0; i < list.size(); ++i)
            byte_level |= parse_pretokenizer(c, list[i], key + ".pretokenizers[" + std::to_string(i) + "]", out);
        return byte_level;
    }
    S s;
    if (t == "Split") {
        s.kind = S::Kind::Split;
        std::string pat;
        if (c.pattern(j, key, pat)) s.regex = std::make_shared<Regex>(pat, c.file + ": " + key + ".pattern");
        else s.literal = pat;
        s.behavior = parse_behavior(c, j, key);
        s.invert = c.flag(j, "invert", false, key);
    } else if (t == "ByteLevel") {
        s.kind = S::Kind::ByteLevel;
        s.add_prefix_space = c.flag(j, "add_prefix_space", true, key);
        if (c.flag(j, "use_regex", true, key)) s.regex = std::make_shared<Regex>(kGpt2Pattern, c.file);
    } else if (t == "Metaspace") {
        s.kind = S::Kind::Metaspace;
        s.replacement = c.str(j, "replacement", key);
        s.split = c.flag(j, "split", true, key);
        if (j.contains("prepend_scheme")) {
            const std::string p = c.str(j, "prepend_scheme", key);
            if (p == "always") s.prepend = PreTokenizer::Prepend::Always;
            else if (p == "first") s.prepend = PreTokenizer::Prepend::First;
            else if (p == "never") s.prepend = PreTokenizer::Prepend::Never;
            else c.unsupported(key + ".prepend_scheme", j["prepend_scheme"]);
        } else {
            s.prepend = c.flag(j, "add_prefix_space", true, key) ? PreTokenizer::Prepend::Always
                                                                  : PreTokenizer::Prepend::Never;
        }
    } else {
        c.unsupported(key + ".type", j["type"]);
    }
    out.add(std::move(s));
    return t == "ByteLevel";
}

// `fused`: a Fuse step came before, so a Strip acts on the whole text instead of on each token.
void parse_decoder(const Ctx& c, const json& j, const std::string& key, Tokenizer::Impl& m, bool& fused) {
    using K = DecodeStep::Kind;
    const std::string t = type_of(c, j, key);
    if (t == "Sequence") {
        const json& list = c.need(j, "decoders", key);
        for (size_t i = 0; i < list.size(); ++i)
            parse_decoder(c, list[i], key + ".decoders[" + std::to_string(i) + "]", m, fused);
    } else if (t == "ByteLevel") {
        m.decode_steps.push_back({K::ByteLevel, "", "", "", 0, 0});
    } else if (t == "Replace") {
        std::string pat;
        if (c.pattern(j, key, pat)) c.unsupported(key + ".pattern", j["pattern"]);
        m.decode_steps.push_back({K::Replace, pat, c.str(j, "content", key), "", 0, 0});
    } else if (t == "ByteFallback") {
        m.decode_steps.push_back({K::ByteFallback, "", "", "", 0, 0});
    } else if (t == "Fuse") {
        fused = true;
    } else if (t == "Strip") {
        const std::string content = c.str(j, "content", key);
        const int start = c.integer(j, "start", key), stop = c.integer(j, "stop", key);
        if (!fused) {
            m.decode_steps.push_back({K::Strip, "", "", content, start, stop});
        } else if (content == " " && stop == 0) {
            m.strip_leading = start;
        } else {
            c.unsupported(key, j);
        }
    } else if (t == "Metaspace") {
        // The replacement character becomes a space; the first one of the text goes unless prepend is "never".
        m.decode_steps.push_back({K::Replace, c.str(j, "replacement", key), " ", "", 0, 0});
        const bool prepend = j.contains("prepend_scheme") ? c.str(j, "prepend_scheme", key) != "never"
                                                          : c.flag(j, "add_prefix_space", true, key);
        if (prepend) m.strip_leading = 1;
    } else {
        c.unsupported(key + ".type", j["type"]);
    }
}

AddedToken parse_added(const Ctx& c, const json& j, const std::string& key, int64_t id) {
    AddedToken t;
    if (id < 0 || id > INT32_MAX) c.fail(key, "id " + std::to_string(id) + " is out of range");
    t.id = static_cast<int32_t>(id);
    t.content = c.str(j, "content", key);
    t.special = c.flag(j, "special", false, key);
    t.lstrip = c.flag(j, "lstrip", false, key);
    t.rstrip = c.flag(j, "rstrip", false, key);
    t.normalized = c.flag(j, "normalized", !t.special, key);
    t.single_word = c.flag(j, "single_word", false, key);
    return t;
}

void read_vocab(const Ctx& c, const json& v, const std::string& key, VocabMap& vocab) {
    if (!v.is_object()) c.fail(key, "is not an object");
    vocab.reserve(v.size());
    for (auto it = v.begin(); it != v.end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX)
            c.fail(key + "[\"" + it.key() + "\"]", it.value().dump() + " is not a valid token id");
        vocab.emplace(it.key(), it.value().get<int32_t>());
    }
}

void load_tokenizer_json(const fs::path& path, Tokenizer::Impl& m) {
    const json j = read_json(path);
    const Ctx c{path.string()};
    if (!j.is_object()) c.fail("(top level)", "is not an object");
    const json& model = c.need(j, "model", "");
    const std::string type = model.is_object() && model.contains("type") ? c.str(model, "type", "model") : "BPE";
    if (type != "BPE") c.unsupported("model.type", model["type"]);
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (model.contains(k) && !model[k].is_null() && model[k] != "") c.unsupported(std::string("model.") + k, model[k]);
    read_vocab(c, c.need(model, "vocab", "model"), "model.vocab", m.vocab);

    std::vector<std::pair<std::string, std::string>> merges;
    const json& mj = c.need(model, "merges", "model");
    for (size_t i = 0; i < mj.size(); ++i) {
        const json& e = mj[i];
        if (e.is_string()) {
            const std::string s = e.get<std::string>();
            const size_t sp = s.find(' ', 1);
            if (sp == std::string::npos) c.fail("model.merges[" + std::to_string(i) + "]", e.dump() + " is not \"a b\"");
            merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
            merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
        } else {
            c.fail("model.merges[" + std::to_string(i) + "]", e.dump() + " is not a pair of tokens");
        }
    }

    if (j.contains("normalizer") && !j["normalizer"].is_null()) parse_normalizer(c, j["normalizer"], "normalizer", m.normalizer);
    bool byte_level = false;
    if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
        byte_level = parse_pretokenizer(c, j["pre_tokenizer"], "pre_tokenizer", m.pretokenizer);
    bool fused = false;
    if (j.contains("decoder") && !j["decoder"].is_null()) parse_decoder(c, j["decoder"], "decoder", m, fused);
    for (const DecodeStep& s : m.decode_steps) byte_level |= s.kind == DecodeStep::Kind::ByteLevel;

    BpeModel::Options opt;
    opt.byte_level = byte_level;
    opt.byte_fallback = c.flag(model, "byte_fallback", false, "model");
    opt.ignore_merges = c.flag(model, "ignore_merges", false, "model");
    opt.fuse_unk = c.flag(model, "fuse_unk", false, "model");
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
        auto it = m.vocab.find(model["unk_token"].get<std::string>());
        if (it == m.vocab.end()) c.fail("model.unk_token", model["unk_token"].dump() + " is not in the vocabulary");
        opt.unk_id = it->second;
    }
    m.bpe = std::make_unique<BpeModel>(m.vocab, merges, opt, c.file);

    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
        const json& list = j["added_tokens"];
        for (size_t i = 0; i < list.size(); ++i) {
            const std::string key = "added_tokens[" + std::to_string(i) + "]";
            const json& id = c.need(list[i], "id", key);
            if (!id.is_number_integer()) c.fail(key + ".id", id.dump() + " is not an integer");
            m.added.push_back(parse_added(c, list[i], key, id.get<int64_t>()));
        }
    }
    // add_bos from a TemplateProcessing post-processor that starts with a special token (alone, or inside a
    // Sequence as in Llama-3's file); tokenizer_config.json may override.
    std::vector<json> processors;
    if (j.contains("post_processor") && j["post_processor"].is_object()) {
        const json& pp = j["post_processor"];
        if (pp.value("type", "") == "Sequence" && pp.contains("processors") && pp["processors"].is_array())
            processors.assign(pp["processors"].begin(), pp["processors"].end());
        else
            processors.push_back(pp);
    }
    for (const json& pp : processors) {
        if (pp.is_object() && pp.value("type", "") == "TemplateProcessing" && pp.contains("single") &&
            pp["single"].is_array() && !pp["single"].empty() && pp["single"][0].is_object() &&
            pp["single"][0].contains("SpecialToken") && pp["single"][0]["SpecialToken"].is_object()) {
            m.add_bos = true;
            m.bos_token = pp["single"][0]["SpecialToken"].value("id", "");
        }
    }
}

void load_vocab_merges(const fs::path& dir, const std::string& tokenizer_class, Tokenizer::Impl& m) {
    const fs::path vpath = dir / "vocab.json", mpath = dir / "merges.txt";
    read_vocab(Ctx{vpath.string()}, read_json(vpath), "(top level)", m.vocab);
    std::ifstream f(mpath);
    if (!f) throw Error(mpath.string() + ": cannot open");
    std::vector<std::pair<std::string, std::string>> merges;
    std::string line;
    for (size_t lineno = 1; std::getline(f, line); ++lineno) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || (lineno == 1 && line.rfind("#version", 0) == 0)) continue;
        const size_t sp = line.find(' ');
        if (sp == 0 || sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
            throw Error(mpath.string() + ": line " + std::to_string(lineno) + ": \"" + line + "\" is not \"a b\"");
        merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    }
    // The slow GPT-2 tokenizer has no normalizer and the GPT-2 regex; Qwen2's (the default) adds NFC.
    const bool gpt2 = tokenizer_class == "GPT2Tokenizer" || tokenizer_class == "GPT2TokenizerFast";
    if (!gpt2) m.normalizer.add({Normalizer::Kind::NFC, "", ""});
    PreTokenizer::Step split;
    split.kind = PreTokenizer::Step::Kind::Split;
    split.regex = std::make_shared<Regex>(gpt2 ? kGpt2Pattern : kQwen2Pattern, mpath.string());
    m.pretokenizer.add(std::move(split));
    m.decode_steps.push_back({DecodeStep::Kind::ByteLevel, "", "", "", 0, 0});
    m.bpe = std::make_unique<BpeModel>(m.vocab, merges, BpeModel::Options{}, mpath.string());
}

// bos_token / eos_token: a string, {"content": ...} or null.
std::string token_string(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return "";
}

void apply_config(const fs::path& path, const json& cfg, Tokenizer::Impl& m) {
    const Ctx c{path.string()};
    if (!cfg.is_object()) c.fail("(top level)", "is not an object");
    if (cfg.contains("added_tokens_decoder")) {
        const json& atd = cfg["added_tokens_decoder"];
        if (!atd.is_object()) c.fail("added_tokens_decoder", "is not an object");
        for (auto it = atd.begin(); it != atd.end(); ++it) {
            const std::string key = "added_tokens_decoder[\"" + it.key() + "\"]";
            int64_t id = -1;
            try {
                size_t used = 0;
                id = std::stoll(it.key(), &used);
                if (used != it.key().size()) id = -1;
            } catch (const std::exception&) {
            }
            AddedToken t = parse_added(c, it.value(), key, id);
            // tokenizer.json, when present, already lists them; the config only adds what is missing.
            bool known = false;
            for (const AddedToken& a : m.added) known |= a.id == t.id;
            if (!known) m.added.push_back(std::move(t));
        }
    }
    if (cfg.contains("bos_token")) m.bos_token = token_string(cfg["bos_token"]);
    if (cfg.contains("eos_token")) m.eos_token = token_string(cfg["eos_token"]);
    m.add_bos = c.flag(cfg, "add_bos_token", m.add_bos, "");
    if (cfg.contains("chat_template")) {
        const json& ct = cfg["chat_template"];
        if (ct.is_string()) {
            m.chat_template = ct.get<std::string>();
        } else if (ct.is_array()) {
            // Named templates: [{"name": "default", "template": ...}, ...]; "default" wins, else the first.
            for (const json& e : ct)
                if (e.is_object() && e.value("name", "") == "default") m.chat_template = e.value("template", "");
            if (m.chat_template.empty() && !ct.empty() && ct[0].is_object()) m.chat_template = ct[0].value("template", "");
        } else if (!ct.is_null()) {
            c.fail("chat_template", "is neither a string nor a list of named templates");
        }
    }
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& dir) {
    const fs::path d(dir);
    if (!fs::is_directory(d)) throw Error(dir + ": tokenizer directory does not exist");
    auto m = std::make_unique<Impl>();
    const fs::path cfg_path = d / "tokenizer_config.json";
    json cfg = json::object();
    if (fs::exists(cfg_path)) cfg = read_json(cfg_path);
    const bool has_json = fs::exists(d / "tokenizer.json");
    try {
        if (has_json) {
            load_tokenizer_json(d / "tokenizer.json", *m);
        } else if (fs::exists(d / "vocab.json") || fs::exists(d / "merges.txt")) {
            const json& cls = cfg.is_object() && cfg.contains("tokenizer_class") ? cfg["tokenizer_class"] : json();
            load_vocab_merges(d, cls.is_string() ? cls.get<std::string>() : "", *m);
        } else {
            throw Error((d / "tokenizer.json").string() + ": missing (and no vocab.json + merges.txt either)");
        }
        apply_config(cfg_path, cfg, *m);
    } catch (const nlohmann::json::exception& e) {
        // A value of an unexpected JSON type that the checks above did not name.
        throw Error((has_json ? (d / "tokenizer.json") : d).string() + " or tokenizer_config.json: " + e.what());
    }
    const fs::path jinja = d / "chat_template.jinja";
    if (fs::exists(jinja)) {
        std::ifstream f(jinja, std::ios::binary);
        if (!f) throw Error(jinja.string() + ": cannot open");
        std::ostringstream ss;
        ss << f.rdbuf();
        m->chat_template = ss.str();
    }
    m->finalize();
    auto id_of = [&](const std::string& s) -> int32_t {
        if (s.empty()) return -1;
        for (const AddedToken& t : m->added)
            if (t.content == s) return t.id;
        auto it = m->vocab.find(s);
        return it == m->vocab.end() ? -1 : it->second;
    };
    m->bos_id = id_of(m->bos_token);
    m->eos_id = id_of(m->eos_token);
    if (m->bos_id < 0) m->add_bos = false;
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(m)));
}

}  // namespace grimoire
