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
    // Reused across calls: a cache miss should not cost two allocations.
    thread_local std::vector<Sym> sym;
    thread_local std::vector<Cand> heap;
    sym.resize(static_cast<size_t>(n));
    heap.clear();
    for (int32_t i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
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

bool BpeModel::WordCache::find(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        const Slot& s = slots_[i];
        if (s.hash == 0) return false;
        if (s.hash == hash && s.key_len == word.size() && keys_.compare(s.key_off, s.key_len, word) == 0) {
            out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.n_ids);
            return true;
        }
    }
}

void BpeModel::WordCache::grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    const size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
        if (s.hash == 0) continue;
        size_t i = s.hash & mask;
        while (slots_[i].hash != 0) i = (i + 1) & mask;
        slots_[i] = s;
    }
}

void BpeModel::WordCache::insert(std::string_view word, uint64_t hash, const std::vector<int32_t>& ids) {
    if (size_ >= kCacheMaxEntries) {  // start over rather than grow without bound
        slots_.assign(slots_.size(), Slot{});
        keys_.clear();
        ids_.clear();
        size_ = 0;
    }
    if (2 * (size_ + 1) > slots_.size()) grow();  // load factor <= 1/2 keeps probe runs short
    const size_t mask = slots_.size() - 1;
    size_t i = hash & mask;
    while (slots_[i].hash != 0) {
        if (slots_[i].hash == hash && slots_[i].key_len == word.size() &&
            keys_.compare(slots_[i].key_off, slots_[i].key_len, word) == 0)
            return;  // another thread got there first
        i = (i + 1) & mask;
    }
    slots_[i] = {hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(ids_.size()),
                 static_cast<uint32_t>(word.size()), static_cast<uint32_t>(ids.size())};
    keys_.append(word);
    ids_.insert(ids_.end(), ids.begin(), ids.end());
    ++size_;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    const bool cacheable = word.size() <= kCacheMaxWord;
    uint64_t hash = 0;
    if (cacheable) {
        hash = std::hash<std::string_view>{}(word) | 1;  // never 0, the empty-slot mark
        std::lock_guard lock(cache_mu_);
        if (cache_.find(word, hash, out)) return;
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
        cache_.insert(word, hash, ids);
    }
}

}  // namespace grimoire
