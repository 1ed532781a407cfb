// Tokenizer edge cases on small hand-written tokenizer directories: SentencePiece-style BPE with byte fallback
// (merge ranks, the "▁" normalizer and the Metaspace pre-tokenizer, unk fusing), streaming decode of characters
// split over byte tokens, and load errors that name the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "../test_util.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace grimoire {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A fresh directory under the build tree holding the given files.
std::string make_dir(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files) {
    const fs::path d = fs::temp_directory_path() / ("grimoire_tok_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    for (const auto& [file, text] : files) std::ofstream(d / file, std::ios::binary) << text;
    return d.string();
}

// Llama-2 layout: <unk> <s> </s>, the 256 byte pieces, then a few pieces. Merge ranks: "a b" first, so
// "▁ab" comes from "▁" + "ab" and not from "▁a" + "b".
json sp_tokenizer_json(bool metaspace) {
    json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        vocab[buf] = 3 + b;
    }
    const std::vector<std::string> pieces = {"▁", "a", "b", "c", "ab", "▁a", "▁ab", "é"};
    for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = 259 + static_cast<int>(i);
    json special = json::array();
    const char* names[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; ++i)
        special.push_back({{"id", i}, {"content", names[i]}, {"single_word", false}, {"lstrip", false},
                           {"rstrip", false}, {"normalized", false}, {"special", true}});
    json j = {
        {"version", "1.0"},
        {"added_tokens", special},
        {"model",
         {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true},
          {"vocab", vocab}, {"merges", json::array({"a b", "▁ a", "▁ ab"})}}},
    };
    if (metaspace) {
        j["normalizer"] = nullptr;
        j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"},
                              {"split", false}};
        j["decoder"] = {{"type", "Sequence"},
                        {"decoders",
                         {{{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}},
                          {{"type", "ByteFallback"}},
                          {{"type", "Fuse"}}}}};
    } else {
        j["normalizer"] = {{"type", "Sequence"},
                           {"normalizers",
                            {{{"type", "Prepend"}, {"prepend", "▁"}},
                             {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}};
        j["pre_tokenizer"] = nullptr;
        j["decoder"] = {{"type", "Sequence"},
                        {"decoders",
                         {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                          {{"type", "ByteFallback"}},
                          {{"type", "Fuse"}},
                          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
    }
    return j;
}

std::vector<int32_t> ids(std::initializer_list<int32_t> l) { return l; }
constexpr int32_t kSpace = 259, kA = 260, kB = 261, kAB = 263, kSpaceA = 264, kSpaceAB = 265, kE = 266;
int32_t byte_id(int b) { return 3 + b; }

class TokenizerSp : public ::testing::TestWithParam<bool> {
protected:
    void SetUp() override {
        const std::string cfg = R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true})";
        dir_ = make_dir(GetParam() ? "metaspace" : "prepend",
                        {{"tokenizer.json", sp_tokenizer_json(GetParam()).dump()}, {"tokenizer_config.json", cfg}});
        tok_ = Tokenizer::load(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string dir_;
    std::unique_ptr<Tokenizer> tok_;
};

TEST_P(TokenizerSp, MergesFollowRankOrder) {
    EXPECT_EQ(tok_->encode("ab"), ids({kSpaceAB}));
    EXPECT_EQ(tok_->encode("a b"), ids({kSpaceA, kSpace, kB}));
    EXPECT_EQ(tok_->encode("ba"), ids({kSpace, kB, kA}));
    EXPECT_EQ(tok_->encode("é"), ids({kSpace, kE}));
    EXPECT_EQ(tok_->encode(""), ids({}));
}

TEST_P(TokenizerSp, ByteFallbackForUnknownCharacters) {
    // U+1F600 is not a piece: its four UTF-8 bytes become <0xF0> <0x9F> <0x98> <0x80>.
    EXPECT_EQ(tok_->encode("a\xF0\x9F\x98\x80"), ids({kSpaceA, byte_id(0xF0), byte_id(0x9F), byte_id(0x98), byte_id(0x80)}));
    EXPECT_EQ(tok_->encode("\n"), ids({kSpace, byte_id(0x0A)}));
    EXPECT_EQ(tok_->decode(tok_->encode("ab\xF0\x9F\x98\x80 c\n")), "ab\xF0\x9F\x98\x80 c\n");
}

TEST_P(TokenizerSp, DecodeStripsOnlyTheFirstSpace) {
    EXPECT_EQ(tok_->decode(ids({kSpaceAB})), "ab");
    EXPECT_EQ(tok_->decode(ids({kSpace, kSpaceAB})), " ab");
    EXPECT_EQ(tok_->decode(ids({kAB, kSpaceA})), "ab a");
    EXPECT_EQ(tok_->decode(ids({1, kSpaceAB, 2})), "<s> ab</s>");
    EXPECT_EQ(tok_->decode(ids({1, kSpaceAB, 2}), true), "ab");
}

TEST_P(TokenizerSp, SpecialTokensAndMetadata) {
    // Metaspace's prepend_scheme "first" prepends only at the very start of the input, not after an added token.
    EXPECT_EQ(tok_->encode("<s>ab"), ids({1, GetParam() ? kAB : kSpaceAB}));
    EXPECT_EQ(tok_->bos_id(), 1);
    EXPECT_EQ(tok_->eos_id(), 2);
    EXPECT_TRUE(tok_->add_bos());
    EXPECT_EQ(tok_->vocab_size(), 267);
    EXPECT_EQ(tok_->token_to_id("<0x41>"), byte_id(0x41));
}

INSTANTIATE_TEST_SUITE_P(NormalizerOrMetaspace, TokenizerSp, ::testing::Values(false, true));

TEST(TokenizerUnk, FusedWithoutByteFallback) {
    json j = sp_tokenizer_json(false);
    j["model"]["byte_fallback"] = false;
    const std::string dir = make_dir("unk", {{"tokenizer.json", j.dump()}});
    const auto tok = Tokenizer::load(dir);
    EXPECT_EQ(tok->encode("axyb"), ids({kSpaceA, 0, kB}));
    j["model"]["fuse_unk"] = false;
    std::ofstream(fs::path(dir) / "tokenizer.json") << j.dump();
    EXPECT_EQ(Tokenizer::load(dir)->encode("axyb"), ids({kSpaceA, 0, 0, kB}));
    fs::remove_all(dir);
}

const Tokenizer& qwen3() {
    static const std::unique_ptr<Tokenizer> tok = Tokenizer::load(test::shared_dir() + "/data/tokenizers/qwen3");
    return *tok;
}

TEST(TokenizerStream, NeverEmitsHalfACharacter) {
    const std::string text = "llama 🦙, 我想在apple工作, ស្វាគមន៍ <think>ok</think> done";
    const auto toks = qwen3().encode(text);
    StreamDecoder d(qwen3());
    std::string all;
    int held_back = 0;
    for (int32_t id : toks) {
        const std::string piece = d.push(id);
        EXPECT_TRUE(utf8::valid(piece)) << "token " << id;
        held_back += piece.empty();
        all += piece;
    }
    all += d.flush();
    EXPECT_EQ(all, text);
    EXPECT_GT(held_back, 0);  // the emoji and CJK characters span several byte tokens
}

TEST(TokenizerStream, EmojiSplitAcrossByteTokens) {
    const std::string goose = "\xF0\x9F\xAA\xBF";  // U+1FABF: three byte tokens in Qwen3
    const auto toks = qwen3().encode(goose);
    ASSERT_EQ(toks.size(), 3u);
    StreamDecoder d(qwen3());
    for (size_t i = 0; i + 1 < toks.size(); ++i) EXPECT_EQ(d.push(toks[i]), "");
    EXPECT_EQ(d.push(toks.back()), goose);
    EXPECT_EQ(d.flush(), "");
    // An unfinished character is U+FFFD at flush, and decode() agrees.
    StreamDecoder cut(qwen3());
    EXPECT_EQ(cut.push(toks[0]), "");
    EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
    EXPECT_EQ(qwen3().decode(std::vector<int32_t>{toks[0]}), "\xEF\xBF\xBD");
}

TEST(TokenizerStream, AddedTokensShownSpecialSkippedOnlyWhenAsked) {
    const auto toks = qwen3().encode("<|im_start|><think>\n</think>\n\nhi<tool_call><|im_end|>");
    for (bool skip : {false, true}) {
        StreamDecoder d(qwen3(), skip);
        std::string all;
        for (int32_t id : toks) all += d.push(id);
        all += d.flush();
        EXPECT_EQ(all, skip ? "<think>\n</think>\n\nhi<tool_call>"
                            : "<|im_start|><think>\n</think>\n\nhi<tool_call><|im_end|>");
    }
}

TEST(TokenizerStream, SentencePieceBytesAndLeadingSpace) {
    const std::string dir = make_dir("stream", {{"tokenizer.json", sp_tokenizer_json(false).dump()}});
    const auto tok = Tokenizer::load(dir);
    StreamDecoder d(*tok);
    EXPECT_EQ(d.push(kSpaceAB), "ab");  // the first space of the text goes (Strip decoder)
    EXPECT_EQ(d.push(byte_id(0xF0)), "");
    EXPECT_EQ(d.push(byte_id(0x9F)), "");
    EXPECT_EQ(d.push(byte_id(0x98)), "");
    EXPECT_EQ(d.push(byte_id(0x80)), "\xF0\x9F\x98\x80");
    EXPECT_EQ(d.push(kSpaceA), " a");
    EXPECT_EQ(d.push(byte_id(0xFF)), "\xEF\xBF\xBD");  // never valid UTF-8: replaced at once
    fs::remove_all(dir);
}

// Random mixes of NFC-stable pieces (ASCII, whitespace runs, CJK, emoji, Khmer, added-token text) round-trip
// exactly, and streaming gives the same text as decode(). Random bytes (mostly invalid UTF-8) never crash and
// decode to well-formed UTF-8.
TEST(TokenizerProperty, RandomTextRoundTripsAndRandomBytesAreSafe) {
    const std::vector<std::string> parts = {"a", "Z", " ", "  ", "\n", "\t", "\r\n", "'s", "'LL", "123", "4",
                                            ".", "...", "!?", "\xE4\xBD\xA0", "\xE5\xA5\xBD",
                                            "\xF0\x9F\xA6\x99", "\xF0\x9F\xAA\xBF", "\xE1\x9E\x9F",
                                            "\xC3\xA9", "<think>", "<|im_end|>", "<|im_", "word", " Word"};
    uint64_t state = 12345;
    auto rnd = [&] {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<uint32_t>(state >> 33);
    };
    for (int iter = 0; iter < 300; ++iter) {
        std::string text;
        for (uint32_t k = rnd() % 24; k > 0; --k) text += parts[rnd() % parts.size()];
        const auto toks = qwen3().encode(text);
        ASSERT_EQ(qwen3().decode(toks), text);
        StreamDecoder d(qwen3());
        std::string streamed;
        for (int32_t id : toks) streamed += d.push(id);
        ASSERT_EQ(streamed + d.flush(), text);

        std::string bytes;
        for (uint32_t k = rnd() % 32; k > 0; --k) bytes.push_back(static_cast<char>(rnd() & 0xFF));
        const std::string back = qwen3().decode(qwen3().encode(bytes));
        ASSERT_TRUE(utf8::valid(back));
        if (utf8::valid(bytes) && back != bytes) {
            // Well-formed input only changes through NFC.
            EXPECT_EQ(qwen3().decode(qwen3().encode(back)), back);
        }
    }
}

// Load errors: each names the file at fault.
std::string load_error(const std::string& dir) {
    try {
        Tokenizer::load(dir);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(TokenizerErrors, NameTheFile) {
    EXPECT_NE(load_error("/nonexistent/tok").find("/nonexistent/tok"), std::string::npos);

    std::string dir = make_dir("empty", {});
    EXPECT_NE(load_error(dir).find("tokenizer.json"), std::string::npos) << load_error(dir);
    fs::remove_all(dir);

    dir = make_dir("malformed", {{"tokenizer.json", "{\"model\": {\"type\": \"BPE\", "}});
    std::string e = load_error(dir);
    EXPECT_NE(e.find(dir + "/tokenizer.json"), std::string::npos) << e;
    EXPECT_NE(e.find("JSON"), std::string::npos) << e;
    fs::remove_all(dir);

    json j = sp_tokenizer_json(false);
    j["model"]["type"] = "Unigram";
    dir = make_dir("unigram", {{"tokenizer.json", j.dump()}});
    e = load_error(dir);
    EXPECT_NE(e.find("tokenizer.json: model.type: \"Unigram\" is not supported"), std::string::npos) << e;
    fs::remove_all(dir);

    j = sp_tokenizer_json(false);
    j["model"]["merges"].push_back("x y");
    dir = make_dir("merge", {{"tokenizer.json", j.dump()}});
    e = load_error(dir);
    EXPECT_NE(e.find("tokenizer.json: merge 3"), std::string::npos) << e;
    fs::remove_all(dir);

    j = sp_tokenizer_json(false);
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
    dir = make_dir("regex", {{"tokenizer.json", j.dump()}});
    e = load_error(dir);
    EXPECT_NE(e.find("tokenizer.json: pre_tokenizer.pattern"), std::string::npos) << e;
    fs::remove_all(dir);

    dir = make_dir("merges_txt", {{"vocab.json", R"({"a": 0, "b": 1, "ab": 2})"}, {"merges.txt", "#version: 0.2\na b c\n"}});
    e = load_error(dir);
    EXPECT_NE(e.find("merges.txt: line 2"), std::string::npos) << e;
    fs::remove_all(dir);

    dir = make_dir("vocab_only", {{"vocab.json", R"({"a": 0})"}});
    e = load_error(dir);
    EXPECT_NE(e.find("merges.txt"), std::string::npos) << e;
    fs::remove_all(dir);
}

TEST(TokenizerVocabMerges, ByteLevelFromVocabAndMerges) {
    // A tiny byte-level vocabulary in the vocab.json + merges.txt form: "Ġ" spells the space byte.
    json vocab = json::object();
    int next = 0;
    for (uint32_t cp : utf8::byte_to_cp()) {
        std::string s;
        utf8::append(s, cp);
        vocab[s] = next++;
    }
    vocab["Ġh"] = next++;
    vocab["Ġhi"] = next++;
    const std::string dir = make_dir("vm", {{"vocab.json", vocab.dump()}, {"merges.txt", "#version: 0.2\nĠ h\nĠh i\n"},
                                            {"tokenizer_config.json", R"({"added_tokens_decoder": {"300": {
        "content": "<x>", "special": true, "lstrip": false, "rstrip": false, "normalized": false}, "301": {
        "content": "<m>", "special": false, "lstrip": true, "rstrip": true, "normalized": false}}})"}});
    const auto tok = Tokenizer::load(dir);
    EXPECT_EQ(tok->encode(" hi<x>"), ids({257, 300}));
    EXPECT_EQ(tok->encode("<x>", false).size(), 3u);
    EXPECT_EQ(tok->decode(ids({257, 300}), true), " hi");
    EXPECT_EQ(tok->vocab_size(), 302);
    // lstrip / rstrip: <m> swallows the whitespace on both sides; <x> keeps it.
    EXPECT_EQ(tok->encode(" hi <m>  hi"), ids({257, 301, 'h', 'i'}));
    EXPECT_EQ(tok->encode(" hi <x> hi"), ids({257, ' ', 300, 257}));
    EXPECT_EQ(tok->decode(ids({257, 301, 'h', 'i'})), " hi<m>hi");
    fs::remove_all(dir);
}

}  // namespace
}  // namespace grimoire
