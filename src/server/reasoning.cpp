#include "server/reasoning.h"

#include "server/stop_matcher.h"
#include "server/text_util.h"

namespace grimoire::server {

namespace {
constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";
}  // namespace

ReasoningParser::ReasoningParser(bool enabled, bool start_open)
    : state_(!enabled ? State::CONTENT : start_open ? State::REASONING : State::MAYBE_OPEN),
      strip_leading_(enabled && start_open) {}

ReasoningDelta ReasoningParser::push(std::string_view text) {
    buf_.append(text);
    ReasoningDelta out;
    run(out, false);
    return out;
}

ReasoningDelta ReasoningParser::flush() {
    ReasoningDelta out;
    run(out, true);
    return out;
}

void ReasoningParser::run(ReasoningDelta& out, bool final) {
    for (;;) {
        if (strip_leading_) {
            const size_t n = leading_space(buf_);
            buf_.erase(0, n);
            if (buf_.empty()) return;
            strip_leading_ = false;
        }
        switch (state_) {
        case State::MAYBE_OPEN: {
            // Only a <think> at the very start (after whitespace) opens reasoning; anything else is content.
            const std::string_view rest = std::string_view(buf_).substr(leading_space(buf_));
            if (rest.starts_with(kOpen)) {
                buf_.erase(0, buf_.size() - rest.size() + kOpen.size());
                state_ = State::REASONING;
                strip_leading_ = true;
                continue;
            }
            if (!final && kOpen.starts_with(rest)) return;  // still undecided
            state_ = State::CONTENT;
            continue;
        }
        case State::REASONING: {
            const size_t end = buf_.find(kClose);
            if (end != std::string::npos) {
                out.reasoning += rstrip_space(std::string_view(buf_).substr(0, end));
                buf_.erase(0, end + kClose.size());
                state_ = State::CONTENT;
                strip_leading_ = true;
                continue;
            }
            if (final) {
                out.reasoning += rstrip_space(buf_);
                buf_.clear();
                return;
            }
            // Hold a possible start of </think>, and trailing whitespace that may turn out to precede it.
            size_t keep = buf_.size() - partial_suffix(buf_, kClose);
            keep = rstrip_space(std::string_view(buf_).substr(0, keep)).size();
            out.reasoning.append(buf_, 0, keep);
            buf_.erase(0, keep);
            return;
        }
        case State::CONTENT:
            out.content += buf_;
            buf_.clear();
            return;
        }
    }
}

}  // namespace grimoire::server
