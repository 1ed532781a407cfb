// load_model(): reads config.json (and generation_config.json), picks the architecture from the registry by
// `architectures[0]`, and lets its factory build the model from the checkpoint's tensors.
#include <algorithm>
#include <filesystem>
#include <set>

#include "model/arch/registry.h"
#include "model/model.h"

namespace grimoire {

namespace fs = std::filesystem;

std::string linear_formats_summary(const ModelInfo& info) {
    std::vector<std::pair<int64_t, std::string>> v;
    for (const auto& [fmt, n] : info.linear_formats) v.emplace_back(n, fmt);
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::string s;
    for (const auto& [n, fmt] : v) s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + fmt;
    return s.empty() ? "none" : s;
}

namespace {

// eos_token_id may be an int, a list of ints, or null; appends the ids not yet in `out`.
void merge_eos(const ConfigReader& cfg, std::vector<int32_t>& out) {
    if (!cfg.has("eos_token_id")) return;
    const auto& v = cfg.json()["eos_token_id"];
    auto add = [&](const nlohmann::json& x) {
        if (!x.is_number_integer())
            cfg.fail("eos_token_id", v.dump() + " is not an integer or a list of integers");
        const auto id = x.get<int32_t>();
        if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
    };
    if (v.is_array()) {
        for (const auto& x : v) add(x);
    } else {
        add(v);
    }
}

std::string architecture_name(const ConfigReader& root) {
    if (!root.has("architectures")) root.fail("architectures", "is required but missing");
    const auto& a = root.json()["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string())
        root.fail("architectures", a.dump() + " is not a non-empty list of strings");
    return a[0].get<std::string>();
}

std::string known_architectures() {
    std::string s;
    for (const ArchEntry& e : architectures()) s += (s.empty() ? "" : ", ") + std::string(e.name);
    return s;
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& dir, Backend& be) {
    if (!fs::is_directory(dir)) throw Error(dir + ": model directory not found");
    const ConfigReader root = ConfigReader::from_file((fs::path(dir) / "config.json").string());
    const std::string arch = architecture_name(root);
    const ArchEntry* entry = find_architecture(arch);
    if (!entry)
        throw Error(root.file() + ": architectures[0]: \"" + arch +
                    "\" is not supported (known: " + known_architectures() + ")");
    // Multimodal wrappers (Qwen3.5, Llama 4...) keep the language model's fields in text_config.
    const std::optional<ConfigReader> text = root.opt_sub("text_config");
    const ConfigReader& cfg = text ? *text : root;

    ModelInfo info;
    info.architecture = arch;
    info.model_type = cfg.get_or<std::string>("model_type", root.get_or<std::string>("model_type", ""));
    info.vocab_size = cfg.get_or<int64_t>("vocab_size", 0);
    info.hidden_size = cfg.get_or<int64_t>("hidden_size", 0);
    info.num_layers = cfg.get_or<int64_t>("num_hidden_layers", 0);
    info.max_position_embeddings = cfg.get_or<int64_t>("max_position_embeddings", 0);
    info.bos_token_id = cfg.get_or<int32_t>("bos_token_id", root.get_or<int32_t>("bos_token_id", -1));
    merge_eos(root, info.eos_token_ids);
    if (text) merge_eos(*text, info.eos_token_ids);
    const fs::path gen = fs::path(dir) / "generation_config.json";
    if (fs::exists(gen)) {
        const ConfigReader g = ConfigReader::from_file(gen.string());
        merge_eos(g, info.eos_token_ids);
        if (info.bos_token_id < 0) info.bos_token_id = g.get_or<int32_t>("bos_token_id", -1);
    }

    const Checkpoint ckpt(dir);
    std::set<std::string> dtypes;
    for (const auto& [name, t] : ckpt.all()) dtypes.insert(std::string(dtype_name(t->dtype)));
    info.dtypes.assign(dtypes.begin(), dtypes.end());

    ModelSource src{cfg, root, ckpt, QuantConfig::from_config(root), std::move(info)};
    return entry->make(be, src);
}

}  // namespace grimoire
