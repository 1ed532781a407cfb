// Tokenizer against real references: the 46 llama.cpp qwen2 vectors with the real Qwen3 tokenizer files, the
// metadata from its tokenizer_config.json, and added-token handling.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "../test_util.h"
#include "tokenizer/tokenizer.h"

namespace grimoire {
namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    EXPECT_TRUE(f.good()) << "cannot open " << path;
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

const Tokenizer& qwen3() {
    static const std::unique_ptr<Tokenizer> tok = Tokenizer::load(test::shared_dir() + "/data/tokenizers/qwen3");
    return *tok;
}

TEST(TokenizerQwen3, Reproduces46LlamaCppVectors) {
    const std::string dir = test::shared_dir() + "/data/tokenizer-tests/";
    const std::string inp = read_file(dir + "ggml-vocab-qwen2.inp");
    const std::string outp = read_file(dir + "ggml-vocab-qwen2.out");
    // Cases are separated by "\n__ggml_vocab_test__\n"; the file ends with a separator, and a case's own
    // trailing newlines (e.g. the "\n\n" case) stay part of it.
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> cases;
    for (size_t pos = 0, next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size())
        cases.push_back(inp.substr(pos, next - pos));
    std::vector<std::vector<int32_t>> expected;
    std::istringstream lines(outp);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream ids(line);
        expected.emplace_back();
        for (int32_t id; ids >> id;) expected.back().push_back(id);
    }
    ASSERT_EQ(cases.size(), 46u);
    ASSERT_EQ(expected.size(), 46u);
    for (size_t i = 0; i < cases.size(); ++i) {
        EXPECT_EQ(qwen3().encode(cases[i]), expected[i]) << "case " << i << ": \"" << cases[i] << "\"";
        EXPECT_EQ(qwen3().decode(expected[i]), cases[i]) << "case " << i;
    }
}

TEST(TokenizerQwen3, MetadataFromConfig) {
    const Tokenizer& t = qwen3();
    EXPECT_EQ(t.vocab_size(), 151669);
    EXPECT_EQ(t.eos_token(), "<|im_end|>");
    EXPECT_EQ(t.eos_id(), 151645);
    EXPECT_EQ(t.bos_id(), -1);
    EXPECT_EQ(t.bos_token(), "");
    EXPECT_FALSE(t.add_bos());
    EXPECT_NE(t.chat_template().find("enable_thinking"), std::string::npos);
    EXPECT_EQ(t.token_to_id("<think>"), 151667);
    EXPECT_EQ(t.token_to_id("Ġworld"), 1879);
    EXPECT_EQ(t.token_to_id("no such piece"), -1);
    EXPECT_EQ(t.token_to_piece(1879), "Ġworld");
    EXPECT_EQ(t.token_to_piece(151657), "<tool_call>");
    EXPECT_TRUE(t.is_special(151643));
    EXPECT_FALSE(t.is_special(151667));  // <think> is an added token but not special
    EXPECT_FALSE(t.is_special(1879));
}

TEST(TokenizerQwen3, AddedTokensMatchedBeforeBpe) {
    const Tokenizer& t = qwen3();
    const auto ids = t.encode("<|im_start|>user\nHi<|im_end|><think>x</think>");
    std::vector<int32_t> want = {151644};
    for (int32_t id : t.encode("user\nHi")) want.push_back(id);
    want.insert(want.end(), {151645, 151667});
    for (int32_t id : t.encode("x")) want.push_back(id);
    want.push_back(151668);
    EXPECT_EQ(ids, want);
    // Without parse_special the special markers are plain text, but <think> (not special) is still one token.
    const auto plain = t.encode("<|im_end|><think>", false);
    EXPECT_GT(plain.size(), 2u);
    EXPECT_EQ(plain.back(), 151667);
    EXPECT_EQ(t.decode(plain), "<|im_end|><think>");
}

TEST(TokenizerQwen3, DecodeShowsAddedAndSkipsSpecialOnlyWhenAsked) {
    const Tokenizer& t = qwen3();
    const auto ids = t.encode("<|im_start|>assistant\n<think>\nok\n</think>\n\n<tool_call>{}</tool_call><|im_end|>");
    EXPECT_EQ(t.decode(ids), "<|im_start|>assistant\n<think>\nok\n</think>\n\n<tool_call>{}</tool_call><|im_end|>");
    EXPECT_EQ(t.decode(ids, true), "assistant\n<think>\nok\n</think>\n\n<tool_call>{}</tool_call>");
}

TEST(TokenizerQwen3, NfcNormalization) {
    // "e" + COMBINING ACUTE ACCENT encodes like the precomposed "é".
    EXPECT_EQ(qwen3().encode("caf\x65\xCC\x81"), qwen3().encode("caf\xC3\xA9"));
}

}  // namespace
}  // namespace grimoire
