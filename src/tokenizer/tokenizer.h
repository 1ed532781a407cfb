// Tokenizer: loads a Hugging Face tokenizer directory and converts text <-> token ids.
//
// Supported layouts (see docs in tokenizer_load.cpp):
//  - tokenizer.json with a BPE model: byte-level (GPT-2 / Qwen / Llama-3: NFC, Split regex, ByteLevel) or
//    SentencePiece-style with byte_fallback (Llama-2: Prepend/Replace "▁" or Metaspace, ByteFallback decoder);
//  - vocab.json + merges.txt (byte-level BPE, Qwen2 pre-tokenizer regex and NFC unless the class is GPT-2's);
//  - tokenizer_config.json beside either (added tokens, bos/eos, add_bos_token, chat_template), and
//    chat_template.jinja, which wins over the config's template.
// A Tokenizer is immutable after load() and safe to use from several threads.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grimoire {

class Tokenizer {
public:
    // Throws Error naming the file when a file is missing, malformed or uses an unsupported feature.
    static std::unique_ptr<Tokenizer> load(const std::string& dir);
    ~Tokenizer();

    // Token ids of `text`; never adds BOS. parse_special == false treats special tokens' text as plain text.
    std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
    // Text of `ids`; ill-formed UTF-8 becomes U+FFFD; ids without a token produce nothing.
    std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

    std::string token_to_piece(int32_t id) const;       // raw vocab string ("" for an unknown id)
    int32_t token_to_id(std::string_view piece) const;  // -1 when absent
    int64_t vocab_size() const;                         // max id + 1 over vocab and added tokens
    bool is_special(int32_t id) const;                  // added token with special: true
    int32_t bos_id() const;                             // -1 when none
    int32_t eos_id() const;                             // -1 when none
    bool add_bos() const;
    std::string bos_token() const;  // "" when none
    std::string eos_token() const;  // "" when none
    const std::string& chat_template() const;  // "" when none

    struct Impl;

private:
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
    friend class StreamDecoder;
};

// Streaming decode: push ids one at a time and get back only complete UTF-8 (never half a character). Added
// tokens such as <think> and <tool_call> are shown; special tokens are dropped only with skip_special.
// The concatenation of every push() and flush() equals decode() of the same ids.
class StreamDecoder {
public:
    StreamDecoder(const Tokenizer& tok, bool skip_special = false);
    std::string push(int32_t id);
    std::string flush();  // whatever is left (an incomplete character as U+FFFD)

private:
    const Tokenizer& tok_;
    bool skip_special_;
    bool started_ = false;  // some text was produced (the leading-space strip applies only before that)
    std::string pending_;   // bytes of an incomplete character
};

}  // namespace grimoire
