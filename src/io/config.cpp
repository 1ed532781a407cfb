#include "io/config.h"

#include <fstream>

namespace grimoire {

ConfigReader ConfigReader::from_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw Error(path + ": cannot open");
    try {
        return ConfigReader(nlohmann::json::parse(f), path);
    } catch (const nlohmann::json::exception& e) {
        throw Error(path + ": not valid JSON: " + e.what());
    }
}

ConfigReader ConfigReader::sub(const std::string& key) const {
    if (!has(key)) fail(key, "is required but missing");
    if (!j_[key].is_object()) fail(key, "is not an object");
    return ConfigReader(j_[key], file_, key_path(key));
}

std::optional<ConfigReader> ConfigReader::opt_sub(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return sub(key);
}

void ConfigReader::unsupported(const std::string& key, const std::string& why) const {
    const std::string v = has(key) ? j_[key].dump() : "(missing)";
    throw Error(file_ + ": " + key_path(key) + ": " + v + " is not supported" + (why.empty() ? "" : " (" + why + ")"));
}

void ConfigReader::fail(const std::string& key, const std::string& what) const {
    throw Error(file_ + ": " + key_path(key) + ": " + what);
}

}  // namespace grimoire
