#include "server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace grimoire::server {

size_t partial_suffix(std::string_view text, std::string_view pattern) {
    const size_t max_k = std::min(text.size(), pattern.empty() ? 0 : pattern.size() - 1);
    for (size_t k = max_k; k > 0; --k)
        if (text.substr(text.size() - k) == pattern.substr(0, k)) return k;
    return 0;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
    for (auto& s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(std::string_view text) {
    if (stopped_) return {};
    held_.append(text);
    if (stops_.empty()) return std::exchange(held_, {});
    // The earliest match wins: with stops "ab" and "b", text "xab" stops at "ab".
    size_t first = std::string::npos;
    for (const auto& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
        stopped_ = true;
        std::string out = held_.substr(0, first);
        held_.clear();
        return out;
    }
    size_t hold = 0;
    for (const auto& s : stops_) hold = std::max(hold, partial_suffix(held_, s));
    std::string out = held_.substr(0, held_.size() - hold);
    held_.erase(0, held_.size() - hold);
    return out;
}

std::string StopMatcher::flush() { return stopped_ ? std::string() : std::exchange(held_, {}); }

}  // namespace grimoire::server
