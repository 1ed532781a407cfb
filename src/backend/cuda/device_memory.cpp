#include "backend/cuda/device_memory.h"

#include <cuda_runtime_api.h>

#include <string>

#include "backend/cuda/cuda_util.h"

namespace grimoire::cuda {

namespace {
constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
std::string gib(size_t b) { return std::to_string(static_cast<double>(b) / (1ull << 30)).substr(0, 6) + " GiB"; }
}  // namespace

DeviceMemory::DeviceMemory(size_t initial_scratch) {
    size_t free_b = 0;
    GRIMOIRE_CUDA_CHECK(cudaMemGetInfo(&free_b, &device_total_));
    add_chunk(initial_scratch);
}

DeviceMemory::~DeviceMemory() {
    for (auto& [p, info] : live_) cudaFree(p);
    for (auto& c : chunks_) cudaFree(c.base);
}

void* DeviceMemory::alloc(size_t bytes, Pool pool) {
    void* p = nullptr;
    const size_t n = align_up(bytes ? bytes : 1);
    const cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
        cudaGetLastError();  // clear the sticky-free error state of a failed allocation
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        throw Error("CUDA out of memory allocating " + gib(n) + " (weights " + gib(used(Pool::WEIGHTS)) + ", state " +
                    gib(used(Pool::STATE)) + ", workspace " + gib(used(Pool::WORKSPACE)) + ", scratch " +
                    gib(scratch_capacity()) + ", free " + gib(free_b) + " of " + gib(total) + ")");
    }
    live_[p] = {n, pool};
    used_[static_cast<int>(pool)] += n;
    return p;
}

void DeviceMemory::free(void* p) {
    auto it = live_.find(p);
    GRIMOIRE_CHECK(it != live_.end(), "free of a pointer DeviceMemory does not own");
    used_[static_cast<int>(it->second.second)] -= it->second.first;
    live_.erase(it);
    GRIMOIRE_CUDA_CHECK(cudaFree(p));
}

void DeviceMemory::add_chunk(size_t bytes) {
    void* p = nullptr;
    const size_t n = align_up(bytes);
    if (cudaMalloc(&p, n) != cudaSuccess) {
        cudaGetLastError();
        throw Error("CUDA out of memory growing the scratch arena by " + gib(n));
    }
    chunks_.push_back({static_cast<char*>(p), n, 0});
}

void* DeviceMemory::scratch(size_t bytes) {
    const size_t n = align_up(bytes ? bytes : 1);
    Chunk* c = &chunks_.back();
    if (c->off + n > c->size) {
        add_chunk(n > c->size ? n : c->size);
        c = &chunks_.back();
    }
    void* p = c->base + c->off;
    c->off += n;
    step_bytes_ += n;
    if (step_bytes_ > high_water_) high_water_ = step_bytes_;
    return p;
}

bool DeviceMemory::reset_scratch() {
    step_bytes_ = 0;
    if (chunks_.size() <= 1) {
        chunks_.back().off = 0;
        return false;
    }
    for (auto& c : chunks_) GRIMOIRE_CUDA_CHECK(cudaFree(c.base));
    chunks_.clear();
    add_chunk(high_water_ + high_water_ / 4);
    return true;
}

size_t DeviceMemory::scratch_capacity() const {
    size_t s = 0;
    for (auto& c : chunks_) s += c.size;
    return s;
}

PinnedArena::PinnedArena(size_t bytes) : size_(bytes) {
    void* p = nullptr;
    GRIMOIRE_CUDA_CHECK(cudaMallocHost(&p, bytes));
    base_ = static_cast<char*>(p);
}

PinnedArena::~PinnedArena() { cudaFreeHost(base_); }

void* PinnedArena::take(size_t bytes) {
    const size_t n = (bytes + 15) / 16 * 16;
    if (off_ + n > size_) return nullptr;
    void* p = base_ + off_;
    off_ += n;
    return p;
}

}  // namespace grimoire::cuda
