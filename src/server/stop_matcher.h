// Stop strings matched on the generated text, across token boundaries. Text that could still be the start of
// a stop string is held back until the next piece decides it, so a stop string is never emitted, not even in
// part, and streaming emits exactly what the non-streaming response contains.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace grimoire::server {

class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops);

    // Appends `text` and returns what is now safe to emit. Once a stop string is found, stopped() is true,
    // the text before it is returned and everything from the stop string on is dropped.
    std::string push(std::string_view text);
    // End of generation: the held-back tail is plain text after all.
    std::string flush();
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
};

// Length of the longest suffix of `text` that is a proper prefix of `pattern` (what must be held back).
size_t partial_suffix(std::string_view text, std::string_view pattern);

}  // namespace grimoire::server
