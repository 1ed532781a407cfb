// Every byte the CUDA backend takes from the device goes through DeviceMemory, which keeps the accounting
// by purpose (weights, per-sequence state, workspace, scratch) that `inspect` and the server banner print.
//
// Scratch is a bump arena: scratch() hands out 256-byte-aligned slices, reset_scratch() rewinds it. Because a
// forward asks for the same sizes in the same order every step, the addresses repeat, which is what lets a
// captured CUDA graph be replayed. When a step needs more than the arena holds, an extra chunk is taken for
// that step, and the next reset (after the caller synchronised) replaces all chunks by one large enough.
#pragma once
#include <cstddef>
#include <unordered_map>
#include <vector>

namespace grimoire::cuda {

enum class Pool { WEIGHTS, STATE, WORKSPACE };

class DeviceMemory {
public:
    explicit DeviceMemory(size_t initial_scratch);
    ~DeviceMemory();
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;

    void* alloc(size_t bytes, Pool pool);  // throws Error (with the accounting) when the device is full
    void free(void* p);
    size_t used(Pool pool) const { return used_[static_cast<int>(pool)]; }

    void* scratch(size_t bytes);
    // Rewinds the arena; consolidates chunks if the last step overflowed (returns true then: the caller must
    // have synchronised the device before, since old chunks are freed).
    bool reset_scratch();
    bool scratch_overflowed() const { return chunks_.size() > 1; }
    size_t scratch_capacity() const;
    size_t scratch_high_water() const { return high_water_; }
    size_t device_total() const { return device_total_; }

private:
    struct Chunk {
        char* base;
        size_t size, off;
    };
    void add_chunk(size_t bytes);

    size_t used_[3] = {0, 0, 0};
    std::unordered_map<void*, std::pair<size_t, Pool>> live_;
    std::vector<Chunk> chunks_;
    size_t step_bytes_ = 0, high_water_ = 0, device_total_ = 0;
};

// A pinned host staging area for the values a step copies to the device (token ids, positions, lengths).
// Bump-allocated per step; a captured graph's host-to-device copies read from the same offsets at replay.
class PinnedArena {
public:
    explicit PinnedArena(size_t bytes);
    ~PinnedArena();
    PinnedArena(const PinnedArena&) = delete;
    PinnedArena& operator=(const PinnedArena&) = delete;
    // nullptr when the request does not fit (the caller flushes, synchronises and resets).
    void* take(size_t bytes);
    void reset() { off_ = 0; }
    size_t used() const { return off_; }

private:
    char* base_ = nullptr;
    size_t size_ = 0, off_ = 0;
};

}  // namespace grimoire::cuda
