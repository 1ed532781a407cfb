// Read-only, memory-mapped safetensors files and sharded checkpoints.
//
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets:[b,e]}, ...,
// "__metadata__": {str: str}}, then the data region. Offsets are relative to the data region. Every offset,
// length, dtype and shape is validated at open time; nothing reads outside the mapping afterwards.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace grimoire {

struct TensorInfo {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;  // points into the mapping; valid while the file lives
    size_t nbytes = 0;
    std::string file;  // the file it came from, for error messages

    int64_t numel() const;
    // The tensor converted to fp32 (any dtype convert_to_f32 supports).
    std::vector<float> to_f32() const;
};

class SafetensorsFile {
public:
    // Maps and validates `path`; throws grimoire::Error naming the file (and tensor) on any defect.
    explicit SafetensorsFile(const std::string& path);
    // Validates an in-memory image (used by the fuzzer and tests); `bytes` must outlive the object.
    SafetensorsFile(const uint8_t* bytes, size_t size, std::string label);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    size_t size() const { return size_; }

private:
    void parse(const uint8_t* bytes, size_t size);

    std::string path_;
    void* map_ = nullptr;
    size_t size_ = 0;
    std::map<std::string, TensorInfo> tensors_;
    std::map<std::string, std::string> metadata_;
};

// Every tensor of a checkpoint directory: `model.safetensors`, or the shards listed in
// `model.safetensors.index.json` (weight_map), or every `*.safetensors` when there is no index.
class Checkpoint {
public:
    explicit Checkpoint(const std::string& dir);

    const std::string& dir() const { return dir_; }
    bool has(std::string_view name) const;
    // Throws Error("<dir>: tensor <name> not found") when missing.
    const TensorInfo& get(std::string_view name) const;
    const TensorInfo* find(std::string_view name) const;
    const std::map<std::string, const TensorInfo*, std::less<>>& all() const { return index_; }
    // Sum of all tensor bytes.
    size_t total_bytes() const;

private:
    std::string dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, const TensorInfo*, std::less<>> index_;
};

}  // namespace grimoire
