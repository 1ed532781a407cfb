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
    size_t first = std::string::npos;
    for (const auto& s : stops_) first = std::min(first, held_.find(s));
    // The earliest start of a stop string that the text so far only begins: it may still match before
    // `first` (stops "abc" and "b" on "ab|c" must stop at "abc"), so nothing from there on is decided.
    size_t hold = 0;
    for (const auto& s : stops_) hold = std::max(hold, partial_suffix(held_, s));
    const size_t undecided = held_.size() - hold;
    if (first != std::string::npos && first <= undecided) {
        stopped_ = true;
        std::string out = held_.substr(0, first);
        held_.clear();
        return out;
    }
    std::string out = held_.substr(0, undecided);
    held_.erase(0, undecided);
    return out;
}

std::string StopMatcher::flush() {
    if (stopped_) return {};
    // No more text: a full match still held back (behind a partial one that never completed) stops here.
    size_t first = std::string::npos;
    for (const auto& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
        stopped_ = true;
        held_.resize(first);
    }
    return std::exchange(held_, {});
}

}  // namespace grimoire::server
