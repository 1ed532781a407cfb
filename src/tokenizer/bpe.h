// Byte-pair-encoding model: turns one pre-tokenized word into token ids by applying merges in rank order.
//
// Two flavours share the merge loop:
//  - byte-level (GPT-2 / Qwen / Llama-3): a word starts as one symbol per byte;
//  - SentencePiece-style (Llama-2): a word starts as one symbol per UTF-8 character, and a character missing
//    from the vocabulary becomes its <0xXX> byte tokens when byte_fallback is on (else the unk token).
// Merges live in a hash map keyed by the (left id, right id) pair, and finished words go to a bounded cache:
// natural text repeats words, so most words never reach the merge loop (the 5 MB/s budget depends on it).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace grimoire {

// Hash for unordered_map<std::string, ...> that also accepts string_view lookups without a copy.
struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using VocabMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
public:
    struct Options {
        bool byte_level = true;     // symbols start as bytes spelt in the GPT-2 byte alphabet
        bool byte_fallback = false;  // unknown characters become <0xXX> tokens
        bool ignore_merges = false;  // a word that is itself in the vocabulary is emitted as one token
        bool fuse_unk = false;       // consecutive unknown symbols become one unk
        int32_t unk_id = -1;         // -1: unknown symbols are dropped (as `tokenizers` does without unk)
    };

    // `vocab` maps vocabulary strings (as written in the file) to ids; `merges` are (left, right) strings in rank
    // order. Throws Error prefixed with `file` when a merge names a token that is not in the vocabulary.
    BpeModel(const VocabMap& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
             Options opt, const std::string& file);

    // Appends the ids of `word` (raw bytes, after normalization and pre-tokenization) to `out`.
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;

private:
    struct Merge {
        int32_t rank;
        int32_t id;  // the merged token
    };
    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
    void merge_all(std::vector<int32_t>& ids) const;

    const VocabMap& vocab_;
    Options opt_;
    std::unordered_map<uint64_t, Merge> merges_;
    int32_t byte_ids_[256];  // byte-level: the token of each byte; SentencePiece: the <0xXX> token (or -1)

    // Finished words (up to kCacheMaxWord bytes), in one open-addressing table over two flat arenas: a lookup
    // touches a slot, the key bytes and the ids, where a node-based map also chases a node and a vector.
    // Cleared when it reaches kCacheMaxEntries, which bounds a long-running server's memory (~40 MB).
    class WordCache {
    public:
        bool find(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const;
        void insert(std::string_view word, uint64_t hash, const std::vector<int32_t>& ids);

    private:
        struct Slot {
            uint64_t hash = 0;  // 0: empty
            uint32_t key_off = 0, ids_off = 0;
            uint32_t key_len = 0, n_ids = 0;
        };
        void grow();
        std::vector<Slot> slots_ = std::vector<Slot>(1 << 12);
        std::string keys_;
        std::vector<int32_t> ids_;
        size_t size_ = 0;
    };
    static constexpr size_t kCacheMaxWord = 128;
    static constexpr size_t kCacheMaxEntries = 1 << 18;
    mutable std::mutex cache_mu_;
    mutable WordCache cache_;
};

}  // namespace grimoire
