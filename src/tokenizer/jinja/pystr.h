// Python str semantics over UTF-8 std::string: Python counts, indexes, splits and strips by code point and uses
// Unicode whitespace, so these helpers decode where it matters (ASCII stays on a fast path).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace grimoire::jinja::pystr {

std::u32string decode(const std::string& s);  // invalid bytes become U+FFFD
std::string encode(const std::u32string& s);
void append_utf8(std::string& out, char32_t cp);
size_t length(const std::string& s);  // code points

bool is_space(char32_t c);      // str.isspace
bool is_printable(char32_t c);  // str.isprintable (used by repr)

std::string upper(const std::string& s);
std::string lower(const std::string& s);
std::string capitalize(const std::string& s);   // str.capitalize
std::string title_method(const std::string& s);  // str.title

// str.strip / lstrip / rstrip; chars = nullopt strips whitespace.
std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / rsplit; sep = nullopt splits on whitespace runs.
std::vector<std::string> split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(const std::string& s, bool keepends);
std::string replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
// str.find / rfind / count in code-point units; start/end already normalised by the caller is not required.
int64_t find(const std::string& s, const std::string& sub, bool reverse);
int64_t count(const std::string& s, const std::string& sub);

// Python slice semantics on a sequence of `n` items; returns the chosen indices.
std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step);

}  // namespace grimoire::jinja::pystr
