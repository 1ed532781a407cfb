#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace grimoire {

namespace fs = std::filesystem;
using json = nlohmann::json;

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::vector<float> TensorInfo::to_f32() const {
    std::vector<float> out(static_cast<size_t>(numel()));
    convert_to_f32(dtype, data, out.data(), out.size());
    return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path + ": cannot open safetensors file");
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(path + ": not a regular file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
        map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map_ == MAP_FAILED) {
            map_ = nullptr;
            ::close(fd);
            throw Error(path + ": mmap failed");
        }
    }
    ::close(fd);
    try {
        parse(static_cast<const uint8_t*>(map_), size_);
    } catch (...) {
        if (map_) ::munmap(map_, size_);
        map_ = nullptr;
        throw;
    }
}

SafetensorsFile::SafetensorsFile(const uint8_t* bytes, size_t size, std::string label)
    : path_(std::move(label)), size_(size) {
    parse(bytes, size);
}

SafetensorsFile::~SafetensorsFile() {
    if (map_) ::munmap(map_, size_);
}

void SafetensorsFile::parse(const uint8_t* bytes, size_t size) {
    auto fail = [&](const std::string& what) { throw Error(path_ + ": " + what); };
    if (size < 8) fail("truncated: shorter than the 8-byte header length");
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | bytes[i];
    if (hlen > size - 8) fail("truncated header: header length " + std::to_string(hlen) + " exceeds file size " +
                              std::to_string(size));
    if (hlen > 100u * 1024 * 1024) fail("header length " + std::to_string(hlen) + " is over the 100 MB limit");
    json header;
    try {
        header = json::parse(bytes + 8, bytes + 8 + hlen);
    } catch (const std::exception& e) {
        fail(std::string("header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) fail("header is not a JSON object");
    const uint8_t* data = bytes + 8 + hlen;
    const uint64_t data_size = size - 8 - hlen;

    struct Range {
        uint64_t begin, end;
        std::string name;
        bool operator<(const Range& o) const { return begin != o.begin ? begin < o.begin : end < o.end; }
    };
    std::vector<Range> ranges;
    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& name = it.key();
        if (name == "__metadata__") {
            if (!it->is_object()) fail("__metadata__ is not an object");
            for (auto m = it->begin(); m != it->end(); ++m)
                if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
            continue;
        }
        auto tfail = [&](const std::string& what) { fail("tensor '" + name + "': " + what); };
        const json& e = *it;
        if (!e.is_object()) tfail("entry is not an object");
        if (!e.contains("dtype") || !e["dtype"].is_string()) tfail("missing dtype");
        const std::string dn = e["dtype"].get<std::string>();
        auto dt = dtype_from_name(dn);
        if (!dt) tfail("unknown dtype '" + dn + "'");
        if (!e.contains("shape") || !e["shape"].is_array()) tfail("missing shape");
        if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
            tfail("data_offsets must be [begin, end]");
        TensorInfo t;
        t.name = name;
        t.dtype = *dt;
        t.file = path_;
        uint64_t numel = 1;
        for (const json& d : e["shape"]) {
            if (!d.is_number_unsigned()) tfail("shape has a non-integer or negative dimension");
            const uint64_t v = d.get<uint64_t>();
            if (v > (uint64_t{1} << 48)) tfail("dimension too large");
            if (v != 0 && numel > (uint64_t{1} << 50) / v) tfail("shape overflows");
            numel *= v;
            t.shape.push_back(static_cast<int64_t>(v));
        }
        const json& off = e["data_offsets"];
        if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) tfail("data_offsets are not integers");
        const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
        if (b > en) tfail("data_offsets begin > end");
        if (en > data_size)
            tfail("data_offsets [" + std::to_string(b) + ", " + std::to_string(en) + "] run past the data (" +
                  std::to_string(data_size) + " bytes)");
        const uint64_t want = numel * dtype_size(*dt);
        if (en - b != want)
            tfail("byte length " + std::to_string(en - b) + " does not match dtype " + dn + " and shape (" +
                  std::to_string(want) + " bytes expected)");
        t.data = data + b;
        t.nbytes = static_cast<size_t>(en - b);
        if (en > b) ranges.push_back({b, en, name});
        tensors_.emplace(name, std::move(t));
    }
    // Sorted by begin, any overlap shows up between neighbours: if i < j overlap, then so do i and i + 1.
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
        if (ranges[i].begin < ranges[i - 1].end)
            fail("tensors '" + ranges[i - 1].name + "' and '" + ranges[i].name + "' overlap");
}

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
    if (!fs::is_directory(dir)) throw Error(dir + ": not a directory");
    std::vector<std::string> shards;
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    std::map<std::string, std::string> weight_map;
    std::map<std::string, std::string> shard_user;  // shard -> one tensor listed for it (for error messages)
    if (fs::exists(index)) {
        json j;
        try {
            std::ifstream f(index);
            j = json::parse(f);
        } catch (const std::exception& e) {
            throw Error(index.string() + ": not valid JSON: " + e.what());
        }
        if (!j.contains("weight_map") || !j["weight_map"].is_object())
            throw Error(index.string() + ": missing weight_map");
        std::set<std::string> uniq;
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it->is_string()) throw Error(index.string() + ": weight_map entry '" + it.key() + "' is not a string");
            const std::string file = it->get<std::string>();
            if (file.find('/') != std::string::npos || file.find("..") != std::string::npos)
                throw Error(index.string() + ": shard name '" + file + "' for tensor '" + it.key() + "' is not a plain file name");
            weight_map[it.key()] = file;
            uniq.insert(file);
            shard_user.emplace(file, it.key());
        }
        shards.assign(uniq.begin(), uniq.end());
    } else if (fs::exists(fs::path(dir) / "model.safetensors")) {
        shards.push_back("model.safetensors");
    } else {
        for (auto& e : fs::directory_iterator(dir))
            if (e.path().extension() == ".safetensors") shards.push_back(e.path().filename().string());
        std::sort(shards.begin(), shards.end());
    }
    if (shards.empty()) throw Error(dir + ": no *.safetensors files");
    for (const auto& s : shards) {
        if (shard_user.count(s) && !fs::exists(fs::path(dir) / s))
            throw Error(index.string() + ": shard " + s + " (listed for tensor '" + shard_user[s] + "') does not exist");
        files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / s).string()));
        for (auto& [name, t] : files_.back()->tensors()) {
            auto [it, inserted] = index_.emplace(name, &t);
            if (!inserted) throw Error(dir + ": tensor '" + name + "' appears in both " + it->second->file + " and " + t.file);
        }
    }
    for (auto& [name, file] : weight_map) {
        auto it = index_.find(name);
        if (it == index_.end()) throw Error(index.string() + ": tensor '" + name + "' is listed for " + file + " but not present there");
        if (fs::path(it->second->file).filename() != file)
            throw Error(index.string() + ": tensor '" + name + "' is listed for " + file + " but found in " + it->second->file);
    }
}

bool Checkpoint::has(std::string_view name) const { return index_.find(name) != index_.end(); }

const TensorInfo* Checkpoint::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
}

const TensorInfo& Checkpoint::get(std::string_view name) const {
    auto it = index_.find(name);
    if (it == index_.end()) throw Error(dir_ + ": tensor '" + std::string(name) + "' not found in the checkpoint");
    return *it->second;
}

size_t Checkpoint::total_bytes() const {
    size_t n = 0;
    for (auto& [k, t] : index_) n += t->nbytes;
    return n;
}

}  // namespace grimoire
