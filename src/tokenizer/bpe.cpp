#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace grimoire {

BpeModel::BpeModel(const VocabMap& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   Options opt, const std::string& file)
    : vocab_(vocab), opt_(opt) {
    auto lookup = [&](const std::string& s) {
        auto it = vocab_.find(s);
        return it == vocab_.end() ? -1 : it->second;
    };
    for (int b = 0; b < 256; ++b) {
        std::string s;
        if (opt_.byte_level) {
            utf8::append(s, utf8::byte_to_cp()[b]);
        } else if (opt_.byte_fallback) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "<0x%02X>", b);
            s = buf;
        }
        byte_ids_[b] = s.empty() ? -1 : lookup(s);
    }
    merges_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& [a, b] = merges[rank];
        const int32_t ia = lookup(a), ib = lookup(b), im = lookup(a + b);
        if (ia < 0 || ib < 0 || im < 0) {
            const std::string& missing = ia < 0 ? a : ib < 0 ? b : a + b;
            throw Error(file + ": merge " + std::to_string(rank) + " (\"" + a + "\" \"" + b + "\"): token \"" +
                        missing + "\" is not in the vocabulary");
        }
        // A repeated pair keeps its first (best) rank, like the reference implementation.
        merges_.emplace(pair_key(ia, ib), Merge{static_cast<int32_t>(rank), im});
    }
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
    bool last_unk = false;
    auto push_unk = [&] {
        if (opt_.unk_id < 0 || (opt_.fuse_unk && last_unk)) return;
        ids.push_back(opt_.unk_id);
        last_unk = true;
    };
    if (opt_.byte_level) {
        for (unsigned char b : word) {
            if (byte_ids_[b] >= 0) {
                ids.push_back(byte_ids_[b]);
                last_unk = false;
            } else {
                push_unk();
            }
        }
        return;
    }
    for (size_t i = 0; i < word.size();) {
        const size_t start = i;
        utf8::next(word, i);
        const std::string_view ch = word.substr(start, i - start);
        if (auto it = vocab_.find(ch); it != vocab_.end()) {
            ids.push_back(it->second);
            last_unk = false;
            continue;
        }
        bool all_bytes = opt_.byte_fallback;
        for (unsigned char b : ch) all_bytes = all_bytes && byte_ids_[b] >= 0;
        if (!all_bytes) {
            push_unk();
            continue;
        }
        for (unsigned char b : ch) ids.push_back(byte_ids_[b]);
        last_unk = false;
    }
}

void BpeModel::merge_all(std::vector<int32_t>& ids) const {
    const int32_t n = static_cast<int32_t>(ids.size());
    if (n < 2) return;
    // Symbols form a doubly linked list over the initial positions; a merge absorbs the right neighbour.
    struct Sym {
        int32_t id, prev, next;
    };
    // A candidate merge of the symbol at `pos` with its right neighbour, valid while both still carry the ids
    // seen when it was queued (a symbol only ever grows, so its id never returns to an older value).
    struct Cand {
        int32_t rank, pos, left, right, merged;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::vector<Sym> sym(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
    std::vector<Cand> heap;
    auto push = [&](int32_t pos) {
        const int32_t nx = sym[pos].next;
        if (nx < 0) return;
        auto it = merges_.find(pair_key(sym[pos].id, sym[nx].id));
        if (it == merges_.end()) return;
        heap.push_back({it->second.rank, pos, sym[pos].id, sym[nx].id, it->second.id});
        std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
        const Cand c = heap.back();
        heap.pop_back();
        Sym& s = sym[c.pos];
        if (s.id != c.left || s.next < 0 || sym[s.next].id != c.right) continue;
        Sym& gone = sym[s.next];
        gone.id = -2;
        s.id = c.merged;
        s.next = gone.next;
        if (s.next >= 0) sym[s.next].prev = c.pos;
        if (s.prev >= 0) push(s.prev);
        push(c.pos);
    }
    ids.clear();
    for (int32_t i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    const bool cacheable = word.size() <= kCacheMaxWord;
    if (cacheable) {
        std::lock_guard lock(cache_mu_);
        if (auto it = cache_.find(word); it != cache_.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int32_t> ids;
    if (opt_.ignore_merges) {
        std::string spelt;
        if (opt_.byte_level) {
            for (unsigned char b : word) utf8::append(spelt, utf8::byte_to_cp()[b]);
        } else {
            spelt = word;
        }
        if (auto it = vocab_.find(spelt); it != vocab_.end()) ids.push_back(it->second);
    }
    if (ids.empty()) {
        initial_symbols(word, ids);
        merge_all(ids);
    }
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
        std::lock_guard lock(cache_mu_);
        if (cache_.size() >= kCacheMaxEntries) cache_.clear();
        cache_.emplace(std::string(word), std::move(ids));
    }
}

}  // namespace grimoire
