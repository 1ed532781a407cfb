// Small string helpers shared by the incremental output parsers.
#pragma once
#include <string>
#include <string_view>

namespace grimoire::server {

inline bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

inline size_t leading_space(std::string_view s) {
    size_t i = 0;
    while (i < s.size() && is_space(s[i])) ++i;
    return i;
}

inline std::string_view rstrip_space(std::string_view s) {
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

inline std::string_view strip_space(std::string_view s) { return rstrip_space(s.substr(leading_space(s))); }

}  // namespace grimoire::server
