// Test driver: renders a chat template over a list of request contexts with grimoire's ChatTemplate and prints
// the results as JSON, so test_templates.py can compare them byte for byte with Python jinja2.
//
//   render_template TEMPLATE CONTEXTS.json
// TEMPLATE is a .jinja file, or a tokenizer_config.json whose "chat_template" is used. Prints
// {"load_error": msg} when the template is refused, else [{"ok": true, "text": ...} | {"ok": false, "error": ...}].
//
//   render_template --snippets SNIPPETS.json
// SNIPPETS is a list of {"template", "context"}; prints one result per snippet (load errors count as errors).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/chat_template.h"

using nlohmann::ordered_json;

static std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw grimoire::Error("cannot open " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: render_template TEMPLATE CONTEXTS.json\n");
        return 2;
    }
    try {
        if (std::string(argv[1]) == "--snippets") {
            ordered_json out = ordered_json::array();
            for (const auto& sn : ordered_json::parse(read_file(argv[2]))) {
                try {
                    grimoire::ChatTemplate tmpl(sn.at("template").get<std::string>());
                    out.push_back({{"ok", true}, {"text", tmpl.render(sn.at("context"))}});
                } catch (const grimoire::Error& e) {
                    out.push_back({{"ok", false}, {"error", e.what()}});
                }
            }
            std::cout << out.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
            return 0;
        }
        std::string path = argv[1];
        std::string source = read_file(path);
        if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0)
            source = ordered_json::parse(source).at("chat_template").get<std::string>();
        ordered_json contexts = ordered_json::parse(read_file(argv[2]));
        ordered_json out;
        try {
            grimoire::ChatTemplate tmpl(source);
            out = ordered_json::array();
            for (const auto& ctx : contexts) {
                try {
                    out.push_back({{"ok", true}, {"text", tmpl.render(ctx)}});
                } catch (const grimoire::Error& e) {
                    out.push_back({{"ok", false}, {"error", e.what()}});
                }
            }
        } catch (const grimoire::Error& e) {
            out = {{"load_error", e.what()}};
        }
        std::cout << out.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "render_template: %s\n", e.what());
        return 1;
    }
}
