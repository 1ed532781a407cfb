#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <deque>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace grimoire {

namespace {

// Per-token decoder steps, in the order the file lists them (ByteLevel, Replace, ByteFallback, Strip).
std::string decode_piece(const std::string& piece, const std::vector<DecodeStep>& steps) {
    std::string s = piece;
    for (const DecodeStep& st : steps) {
        switch (st.kind) {
            case DecodeStep::Kind::ByteLevel: {
                // Each character of the byte alphabet is one byte; a token with any other character (an added
                // token such as "\n\n") is kept as written, like the reference decoder.
                std::string bytes;
                bool ok = true;
                for (size_t i = 0; i < s.size() && ok;) {
                    const int b = utf8::cp_to_byte(utf8::next(s, i));
                    ok = b >= 0;
                    bytes.push_back(static_cast<char>(b));
                }
                if (ok) s = std::move(bytes);
                break;
            }
            case DecodeStep::Kind::Replace: {
                std::string r;
                size_t i = 0;
                for (size_t p; !st.from.empty() && (p = s.find(st.from, i)) != std::string::npos;
                     i = p + st.from.size())
                    r += s.substr(i, p - i) + st.to;
                s = r + s.substr(i);
                break;
            }
            case DecodeStep::Kind::ByteFallback:
                if (s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>' && std::isxdigit(static_cast<unsigned char>(s[3])) &&
                    std::isxdigit(static_cast<unsigned char>(s[4])))
                    s = std::string(1, static_cast<char>(std::stoi(s.substr(3, 2), nullptr, 16)));
                break;
            case DecodeStep::Kind::Strip: {
                size_t b = 0, e = s.size();
                for (int k = 0; k < st.start && s.compare(b, st.content.size(), st.content) == 0; ++k)
                    b += st.content.size();
                for (int k = 0; k < st.stop && e >= b + st.content.size() &&
                                s.compare(e - st.content.size(), st.content.size(), st.content) == 0;
                     ++k)
                    e -= st.content.size();
                s = s.substr(b, e - b);
                break;
            }
        }
    }
    return s;
}

}  // namespace

void Tokenizer::Impl::finalize() {
    int64_t n = 0;
    for (const auto& [s, id] : vocab) n = std::max<int64_t>(n, id + 1);
    for (const AddedToken& t : added) n = std::max<int64_t>(n, t.id + 1);
    pieces.assign(static_cast<size_t>(n), std::string());
    special.assign(static_cast<size_t>(n), 0);
    for (const auto& [s, id] : vocab)
        if (id >= 0) pieces[id] = s;
    for (const AddedToken& t : added) {
        pieces[t.id] = t.content;
        special[t.id] = t.special;
        added_ids.emplace(t.content, t.id);
        (t.normalized ? norm_matcher : raw_matcher).add(t);
    }
    decoded.resize(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) decoded[i] = decode_piece(pieces[i], decode_steps);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
    const Impl& m = *impl_;
    std::vector<int32_t> out;
    out.reserve(text.size() / 3);
    std::vector<AddedTokenMatcher::Piece> segs, norm_segs;
    m.raw_matcher.split(text, parse_special, segs);
    std::string scratch;
    std::vector<std::string_view> words;
    std::deque<std::string> arena;
    for (const auto& seg : segs) {
        if (seg.id >= 0) {
            out.push_back(seg.id);
            continue;
        }
        const bool at_origin = seg.text.data() == text.data();
        const std::string_view norm = m.normalizer.apply(seg.text, scratch);
        norm_segs.clear();
        m.norm_matcher.split(norm, parse_special, norm_segs);
        for (const auto& ns : norm_segs) {
            if (ns.id >= 0) {
                out.push_back(ns.id);
                continue;
            }
            words.clear();
            arena.clear();
            m.pretokenizer.run(ns.text, at_origin && ns.text.data() == norm.data(), words, arena);
            for (std::string_view w : words) m.bpe->encode_word(w, out);
        }
    }
    return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
    StreamDecoder d(*this, skip_special);
    std::string out;
    for (int32_t id : ids) out += d.push(id);
    return out + d.flush();
}

std::string Tokenizer::token_to_piece(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < impl_->pieces.size() ? impl_->pieces[id] : std::string();
}

int32_t Tokenizer::token_to_id(std::string_view piece) const {
    if (auto it = impl_->added_ids.find(piece); it != impl_->added_ids.end()) return it->second;
    if (auto it = impl_->vocab.find(piece); it != impl_->vocab.end()) return it->second;
    return -1;
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->pieces.size()); }
bool Tokenizer::is_special(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id];
}
int32_t Tokenizer::bos_id() const { return impl_->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->eos_id; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
std::string Tokenizer::bos_token() const { return impl_->bos_token; }
std::string Tokenizer::eos_token() const { return impl_->eos_token; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special) : tok_(tok), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
    const Tokenizer::Impl& m = *tok_.impl_;
    if (id < 0 || static_cast<size_t>(id) >= m.decoded.size()) return {};
    if (skip_special_ && m.special[id]) return {};
    std::string_view piece = m.decoded[id];
    if (!started_ && !piece.empty()) {
        // Strip acts on the start of the whole text, whichever token carries it.
        started_ = true;
        for (int k = 0; k < m.strip_leading && !piece.empty() && piece[0] == ' '; ++k) piece.remove_prefix(1);
    }
    pending_ += piece;
    std::string out;
    const size_t used = utf8::append_lossy(out, pending_, false);
    pending_.erase(0, used);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out;
    utf8::append_lossy(out, pending_, true);
    pending_.clear();
    return out;
}

}  // namespace grimoire
