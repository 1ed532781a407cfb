// Equality with the Hugging Face `tokenizers` library (fixture made by tools/make_tokenizer_fixtures.py) on
// windows of the Gutenberg corpus and on hand-picked strings, for the real Qwen3 files (byte-level BPE) and the
// Llama-2 style stories260k tokenizer.json (SentencePiece BPE with byte fallback); plus encode/decode round
// trips on the first 200 KB of the corpus.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../test_util.h"
#include "tokenizer/tokenizer.h"

namespace grimoire {
namespace {

const nlohmann::json& reference() {
    static const nlohmann::json j = [] {
        std::ifstream f(test::fixtures_dir() + "/tokenizer/hf_reference.json");
        EXPECT_TRUE(f.good());
        return nlohmann::json::parse(f);
    }();
    return j;
}

// Loaded on first use only: each test runs in its own process under ctest.
const Tokenizer& tokenizer(const std::string& name) {
    if (name == "qwen3") {
        static const auto qwen = Tokenizer::load(test::shared_dir() + "/data/tokenizers/qwen3");
        return *qwen;
    }
    static const auto sp = Tokenizer::load(test::fixtures_dir() + "/tokenizer/stories260k");
    return *sp;
}

// The first `bytes` of the decompressed corpus.
std::string corpus_prefix(size_t bytes) {
    const std::string path = test::shared_dir() + "/data/corpus/gutenberg-150M.txt.zst";
    const std::string cmd = "zstd -dc '" + path + "' 2>/dev/null | head -c " + std::to_string(bytes);
    FILE* p = popen(cmd.c_str(), "r");
    EXPECT_NE(p, nullptr) << cmd;
    std::string out;
    char buf[65536];
    for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    if (p) pclose(p);
    return out;
}

const std::string& corpus_sample() {
    static const std::string s = [] {
        std::string t = corpus_prefix(200 * 1024);
        t.resize(t.rfind('\n') + 1);  // whole lines: no character cut in half
        return t;
    }();
    return s;
}

class TokenizerHf : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerHf, CorpusWindowsMatchTokenizersLibrary) {
    const Tokenizer& tok = tokenizer(GetParam());
    const auto& windows = reference()["windows"];
    ASSERT_GE(windows.size(), 4u);
    for (const auto& w : windows) {
        const size_t off = w["offset"], len = w["length"];
        ASSERT_LE(off + len, corpus_sample().size());
        const std::string text = corpus_sample().substr(off, len);
        const auto& r = w[GetParam()];
        EXPECT_EQ(tok.encode(text), r["ids"].get<std::vector<int32_t>>()) << "window at " << off;
        EXPECT_EQ(tok.decode(r["ids"].get<std::vector<int32_t>>()), r["decoded"].get<std::string>());
    }
}

TEST_P(TokenizerHf, HandPickedStringsMatchTokenizersLibrary) {
    const Tokenizer& tok = tokenizer(GetParam());
    for (const auto& s : reference()["strings"]) {
        const std::string text = s["text"];
        const auto& r = s[GetParam()];
        const auto want = r["ids"].get<std::vector<int32_t>>();
        EXPECT_EQ(tok.encode(text), want) << text;
        EXPECT_EQ(tok.decode(want), r["decoded"].get<std::string>()) << text;
    }
}

TEST_P(TokenizerHf, CorpusRoundTrip) {
    const Tokenizer& tok = tokenizer(GetParam());
    const std::string& text = corpus_sample();
    ASSERT_GT(text.size(), 150u * 1024);
    const auto ids = tok.encode(text);
    // Qwen3 spends ~4 bytes per token on English prose, the 512-piece vocabulary ~2.
    const double bytes_per_token = static_cast<double>(text.size()) / static_cast<double>(ids.size());
    EXPECT_GT(bytes_per_token, GetParam() == "qwen3" ? 3.5 : 1.5);
    EXPECT_LT(bytes_per_token, GetParam() == "qwen3" ? 5.5 : 3.5);
    // The corpus separates books with <|endoftext|>: special for Qwen3, plain text for stories260k.
    std::string decoded = tok.decode(ids);
    EXPECT_EQ(decoded.size(), text.size());
    EXPECT_TRUE(decoded == text) << "round trip differs";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenizerHf, ::testing::Values("qwen3", "stories260k"));

TEST(TokenizerHf, Stories260kMetadata) {
    const Tokenizer& t = tokenizer("stories260k");
    EXPECT_EQ(t.vocab_size(), 512);
    EXPECT_EQ(t.bos_id(), 1);
    EXPECT_EQ(t.eos_id(), 2);
    EXPECT_TRUE(t.add_bos());
    EXPECT_EQ(t.bos_token(), "<s>");
    EXPECT_EQ(t.token_to_piece(3 + 0x0A), "<0x0A>");
    EXPECT_TRUE(t.is_special(1));
    EXPECT_EQ(t.decode(std::vector<int32_t>{1, t.token_to_id("▁Once")}, true), "Once");
}

}  // namespace
}  // namespace grimoire
