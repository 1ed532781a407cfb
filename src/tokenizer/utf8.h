// UTF-8 helpers shared by the tokenizer: validation with U+FFFD replacement, Unicode whitespace, and the GPT-2
// "byte-level" alphabet that lets a BPE vocabulary spell arbitrary bytes with printable characters.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace grimoire::utf8 {

// Appends code point `cp` encoded as UTF-8.
void append(std::string& out, uint32_t cp);

// Decodes the character at s[i] and advances i. Invalid or truncated input yields one byte as a code point of
// its own (0xDC00 + byte, never a real character) so callers always make progress.
uint32_t next(std::string_view s, size_t& i);

// Appends `bytes` to `out`, replacing each ill-formed subsequence with U+FFFD ("maximal subpart" rule, the one
// Python's and Rust's lossy decoders use). With final == false a truncated character at the very end is not
// replaced: its bytes are left unconsumed. Returns the number of bytes consumed.
size_t append_lossy(std::string& out, std::string_view bytes, bool final);

// True when s is well-formed UTF-8.
bool valid(std::string_view s);

// Unicode White_Space (what Rust's char::is_whitespace and the `tokenizers` strip rules use).
bool is_space(uint32_t cp);

// GPT-2 byte-level alphabet: byte b is spelt by code point byte_to_cp()[b] in vocab strings.
const std::array<uint32_t, 256>& byte_to_cp();
// Inverse: code point -> byte, or -1 when cp is not in the alphabet.
int cp_to_byte(uint32_t cp);

}  // namespace grimoire::utf8
