// SafetensorsFile / Checkpoint validation: every defect is refused with a message naming the file and the
// tensor; valid files parse to the right dtypes, shapes, bytes and metadata.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

namespace grimoire {
namespace {

namespace fs = std::filesystem;

// 8-byte little-endian header length, the header, then `data` bytes.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes, uint64_t hlen_override = 0) {
    const uint64_t hlen = hlen_override ? hlen_override : header.size();
    std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
    for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(hlen >> (8 * i));
    std::memcpy(b.data() + 8, header.data(), header.size());
    for (size_t i = 0; i < data_bytes; ++i) b[8 + header.size() + i] = static_cast<uint8_t>(i * 7 + 1);
    return b;
}

std::string error_of(const std::vector<uint8_t>& b, const std::string& label = "model.safetensors") {
    try {
        SafetensorsFile f(b.data(), b.size(), label);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(Safetensors, ParsesValidImage) {
    const std::string h = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
                          R"("b":{"dtype":"F32","shape":[3],"data_offsets":[12,24]},"s":{"dtype":"I64","shape":[],"data_offsets":[24,32]},)"
                          R"("e":{"dtype":"F32","shape":[0,4],"data_offsets":[32,32]}})";
    std::vector<uint8_t> b = image(h, 32);
    const float vals[3] = {1.5f, -2.0f, 0.25f};
    std::memcpy(b.data() + 8 + h.size() + 12, vals, 12);
    SafetensorsFile f(b.data(), b.size(), "mem.safetensors");
    ASSERT_EQ(f.tensors().size(), 4u);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    const TensorInfo& w = f.tensors().at("w");
    EXPECT_EQ(w.dtype, DType::BF16);
    EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(w.nbytes, 12u);
    EXPECT_EQ(w.data, b.data() + 8 + h.size());
    EXPECT_EQ(w.file, "mem.safetensors");
    EXPECT_EQ(f.tensors().at("b").to_f32(), (std::vector<float>{1.5f, -2.0f, 0.25f}));
    EXPECT_EQ(f.tensors().at("s").numel(), 1);
    EXPECT_EQ(f.tensors().at("e").numel(), 0);
}

TEST(Safetensors, TruncatedFile) {
    EXPECT_EQ(error_of({1, 2, 3}), "model.safetensors: truncated: shorter than the 8-byte header length");
    const std::string e = error_of(image("{}", 0, 4096));
    EXPECT_NE(e.find("model.safetensors: truncated header: header length 4096 exceeds file size 10"), std::string::npos) << e;
}

TEST(Safetensors, HeaderNotJson) {
    const std::string e = error_of(image("{\"w\": [1, 2", 0));
    EXPECT_NE(e.find("model.safetensors: header is not valid JSON"), std::string::npos) << e;
    EXPECT_EQ(error_of(image("[1,2]", 0)), "model.safetensors: header is not a JSON object");
    EXPECT_EQ(error_of(image(R"({"__metadata__": 3})", 0)), "model.safetensors: __metadata__ is not an object");
}

TEST(Safetensors, UnknownDtype) {
    EXPECT_EQ(error_of(image(R"({"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}})", 2)),
              "model.safetensors: tensor 'w': unknown dtype 'Q4_K'");
    EXPECT_EQ(error_of(image(R"({"w":{"shape":[2],"data_offsets":[0,2]}})", 2)),
              "model.safetensors: tensor 'w': missing dtype");
}

TEST(Safetensors, ShapeByteMismatch) {
    EXPECT_EQ(error_of(image(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24)),
              "model.safetensors: tensor 'w': byte length 20 does not match dtype F32 and shape (24 bytes expected)");
    EXPECT_EQ(error_of(image(R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]}})", 24)),
              "model.safetensors: tensor 'w': shape has a non-integer or negative dimension");
    EXPECT_EQ(error_of(image(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4)),
              "model.safetensors: tensor 'w': shape has a non-integer or negative dimension");
    EXPECT_EQ(error_of(image(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4)),
              "model.safetensors: tensor 'w': shape overflows");
    EXPECT_EQ(error_of(image(R"({"w":{"dtype":"U8","shape":"4","data_offsets":[0,4]}})", 4)),
              "model.safetensors: tensor 'w': missing shape");
}

TEST(Safetensors, OverlappingTensors) {
    EXPECT_EQ(error_of(image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16)),
              "model.safetensors: tensors 'a' and 'b' overlap");
    // Same begin offset: both names are still reported, not one twice.
    EXPECT_EQ(error_of(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", 8)),
              "model.safetensors: tensors 'a' and 'b' overlap");
    // A long tensor covering two later ones.
    EXPECT_EQ(error_of(image(R"({"big":{"dtype":"U8","shape":[30],"data_offsets":[0,30]},)"
                             R"("x":{"dtype":"U8","shape":[4],"data_offsets":[10,14]},"y":{"dtype":"U8","shape":[4],"data_offsets":[20,24]}})", 30)),
              "model.safetensors: tensors 'big' and 'x' overlap");
}

TEST(Safetensors, OffsetsOutOfRange) {
    EXPECT_EQ(error_of(image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 16)),
              "model.safetensors: tensor 'w': data_offsets [8, 24] run past the data (16 bytes)");
    EXPECT_EQ(error_of(image(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 16)),
              "model.safetensors: tensor 'w': data_offsets begin > end");
    EXPECT_EQ(error_of(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 16)),
              "model.safetensors: tensor 'w': data_offsets must be [begin, end]");
    EXPECT_EQ(error_of(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 16)),
              "model.safetensors: tensor 'w': data_offsets are not integers");
    EXPECT_EQ(error_of(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,0]}})", 16)),
              "model.safetensors: tensor 'w': data_offsets begin > end");
}

// A scratch checkpoint directory, removed afterwards.
class CheckpointDir : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("grimoire_ckpt_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
                std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    void write(const std::string& name, const std::vector<uint8_t>& bytes) {
        std::ofstream f(dir_ / name, std::ios::binary);
        f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    void write_text(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
    std::string error_of_dir() {
        try {
            Checkpoint c(dir_.string());
        } catch (const Error& e) {
            return e.what();
        }
        return "(no error)";
    }
    fs::path dir_;
};

const std::string kShardA = R"({"a.w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
const std::string kShardB = R"({"b.w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";

TEST_F(CheckpointDir, ShardedIndexLoads) {
    write("m-1.safetensors", image(kShardA, 8));
    write("m-2.safetensors", image(kShardB, 12));
    write_text("model.safetensors.index.json",
               R"({"metadata":{},"weight_map":{"a.w":"m-1.safetensors","b.w":"m-2.safetensors"}})");
    Checkpoint c(dir_.string());
    EXPECT_TRUE(c.has("a.w"));
    EXPECT_EQ(c.get("b.w").shape, (std::vector<int64_t>{3}));
    EXPECT_EQ(c.total_bytes(), 20u);
    EXPECT_EQ(fs::path(c.get("b.w").file).filename(), "m-2.safetensors");
    try {
        c.get("c.w");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), dir_.string() + ": tensor 'c.w' not found in the checkpoint");
    }
}

TEST_F(CheckpointDir, IndexPointsToMissingTensor) {
    write("m-1.safetensors", image(kShardA, 8));
    write_text("model.safetensors.index.json", R"({"weight_map":{"a.w":"m-1.safetensors","ghost.w":"m-1.safetensors"}})");
    EXPECT_EQ(error_of_dir(), (dir_ / "model.safetensors.index.json").string() +
                                  ": tensor 'ghost.w' is listed for m-1.safetensors but not present there");
}

TEST_F(CheckpointDir, IndexPointsToWrongShard) {
    write("m-1.safetensors", image(kShardA, 8));
    write("m-2.safetensors", image(kShardB, 12));
    write_text("model.safetensors.index.json", R"({"weight_map":{"a.w":"m-2.safetensors","b.w":"m-2.safetensors"}})");
    const std::string e = error_of_dir();
    // m-1 is not in the index, so a.w is simply absent.
    EXPECT_EQ(e, (dir_ / "model.safetensors.index.json").string() +
                     ": tensor 'a.w' is listed for m-2.safetensors but not present there");
}

TEST_F(CheckpointDir, IndexPointsToMissingShard) {
    write("m-1.safetensors", image(kShardA, 8));
    write_text("model.safetensors.index.json", R"({"weight_map":{"a.w":"m-1.safetensors","b.w":"m-9.safetensors"}})");
    EXPECT_EQ(error_of_dir(), (dir_ / "model.safetensors.index.json").string() +
                                  ": shard m-9.safetensors (listed for tensor 'b.w') does not exist");
}

TEST_F(CheckpointDir, IndexDefects) {
    write("m-1.safetensors", image(kShardA, 8));
    write_text("model.safetensors.index.json", R"({"weight_map":{"a.w":"../m-1.safetensors"}})");
    EXPECT_NE(error_of_dir().find("shard name '../m-1.safetensors' for tensor 'a.w' is not a plain file name"),
              std::string::npos);
    write_text("model.safetensors.index.json", R"({"weight_map":[1]})");
    EXPECT_EQ(error_of_dir(), (dir_ / "model.safetensors.index.json").string() + ": missing weight_map");
    write_text("model.safetensors.index.json", R"({"weight_map":{)");
    EXPECT_NE(error_of_dir().find("model.safetensors.index.json: not valid JSON"), std::string::npos);
}

TEST_F(CheckpointDir, DuplicateTensorAcrossShards) {
    write("m-1.safetensors", image(kShardA, 8));
    write("m-2.safetensors", image(kShardA, 8));
    const std::string e = error_of_dir();
    EXPECT_NE(e.find("tensor 'a.w' appears in both"), std::string::npos) << e;
    EXPECT_NE(e.find("m-1.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find("m-2.safetensors"), std::string::npos) << e;
}

TEST_F(CheckpointDir, BadShardNamesFileAndTensor) {
    write("model.safetensors", image(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
    EXPECT_EQ(error_of_dir(), (dir_ / "model.safetensors").string() +
                                  ": tensor 'x': byte length 8 does not match dtype F32 and shape (12 bytes expected)");
}

TEST_F(CheckpointDir, EmptyOrMissing) {
    EXPECT_EQ(error_of_dir(), dir_.string() + ": no *.safetensors files");
    try {
        Checkpoint c((dir_ / "nope").string());
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), (dir_ / "nope").string() + ": not a directory");
    }
    try {
        SafetensorsFile f((dir_ / "absent.safetensors").string());
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), (dir_ / "absent.safetensors").string() + ": cannot open safetensors file");
    }
}

}  // namespace
}  // namespace grimoire
