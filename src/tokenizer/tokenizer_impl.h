// Internal state of a Tokenizer, shared by tokenizer.cpp (encode/decode) and tokenizer_load.cpp (parsing).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace grimoire {

// One per-token step of the `decoder` chain; applied to every token string once, at load time.
struct DecodeStep {
    enum class Kind { ByteLevel, Replace, ByteFallback, Strip } kind;
    std::string from, to;  // Replace
    std::string content;   // Strip: the character removed
    int start = 0, stop = 0;
};

struct Tokenizer::Impl {
    VocabMap vocab;                       // model vocabulary as written in the file -> id
    VocabMap added_ids;                   // added token content -> id
    std::vector<AddedToken> added;        // in file order
    std::vector<std::string> pieces;      // id -> vocab string or added content ("" for holes)
    std::vector<std::string> decoded;     // id -> bytes it decodes to (per-token decoder steps applied)
    std::vector<uint8_t> special;         // id -> added token marked special

    AddedTokenMatcher raw_matcher;   // added tokens with normalized == false, matched on the raw text
    AddedTokenMatcher norm_matcher;  // normalized == true, matched after normalization
    Normalizer normalizer;
    PreTokenizer pretokenizer;
    std::unique_ptr<BpeModel> bpe;

    std::vector<DecodeStep> decode_steps;
    // Leading copies of ' ' removed from the start of the whole decoded text (Strip after Fuse, Metaspace).
    int strip_leading = 0;

    int32_t bos_id = -1, eos_id = -1;
    bool add_bos = false;
    std::string bos_token, eos_token, chat_template;

    // Builds pieces/decoded/special and the matchers once vocab and added tokens are known.
    void finalize();
};

}  // namespace grimoire
