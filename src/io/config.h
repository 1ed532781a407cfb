// Typed reads of config.json-style JSON. Every failure names the file, the key path and the value, e.g.
//   config.json: rope_scaling.type: "dynamic" is not supported
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace grimoire {

class ConfigReader {
public:
    ConfigReader(nlohmann::json j, std::string file, std::string path = "")
        : j_(std::move(j)), file_(std::move(file)), path_(std::move(path)) {}
    // Reads and parses a JSON file; throws Error naming the file when it is missing or malformed.
    static ConfigReader from_file(const std::string& path);

    bool has(const std::string& key) const { return j_.is_object() && j_.contains(key) && !j_[key].is_null(); }
    // A nested object; throws if present but not an object.
    ConfigReader sub(const std::string& key) const;
    std::optional<ConfigReader> opt_sub(const std::string& key) const;

    template <class T>
    T get(const std::string& key) const {
        if (!has(key)) fail(key, "is required but missing");
        return convert<T>(key, j_[key]);
    }
    template <class T>
    T get_or(const std::string& key, T dflt) const {
        return has(key) ? convert<T>(key, j_[key]) : dflt;
    }
    // Throws "<file>: <path.key>: <value> is not supported<why>".
    [[noreturn]] void unsupported(const std::string& key, const std::string& why = "") const;
    [[noreturn]] void fail(const std::string& key, const std::string& what) const;

    const nlohmann::json& json() const { return j_; }
    const std::string& file() const { return file_; }
    std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

private:
    template <class T>
    T convert(const std::string& key, const nlohmann::json& v) const {
        try {
            if constexpr (std::is_same_v<T, bool>) {
                if (!v.is_boolean()) fail(key, v.dump() + " is not a boolean");
            } else if constexpr (std::is_integral_v<T>) {
                if (!v.is_number_integer()) fail(key, v.dump() + " is not an integer");
                // get<T>() would silently wrap (e.g. -1 as a size, 2^40 as an int32).
                const bool fits = v.is_number_unsigned() ? std::in_range<T>(v.get<uint64_t>())
                                                         : std::in_range<T>(v.get<int64_t>());
                if (!fits) fail(key, v.dump() + " is out of range");
            } else if constexpr (std::is_floating_point_v<T>) {
                if (!v.is_number()) fail(key, v.dump() + " is not a number");
            } else if constexpr (std::is_same_v<T, std::string>) {
                if (!v.is_string()) fail(key, v.dump() + " is not a string");
            }
            return v.get<T>();
        } catch (const nlohmann::json::exception&) {
            fail(key, v.dump() + " has the wrong type");
        }
    }

    nlohmann::json j_;
    std::string file_;
    std::string path_;
};

}  // namespace grimoire
