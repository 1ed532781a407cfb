// A non-owning view of a contiguous row-major tensor on some device. Storage belongs to a backend
// (weights, sequence state, or the per-step scratch arena).
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>

#include "core/dtype.h"
#include "core/error.h"

namespace grimoire {

enum class Device : uint8_t { CPU, CUDA };

struct Tensor {
    static constexpr int kMaxDims = 4;
    void* data = nullptr;
    DType dtype = DType::F32;
    Device device = Device::CPU;
    int ndim = 0;
    std::array<int64_t, kMaxDims> shape{};

    Tensor() = default;
    Tensor(void* d, DType t, Device dev, std::initializer_list<int64_t> s) : data(d), dtype(t), device(dev) {
        GRIMOIRE_CHECK(s.size() <= kMaxDims);
        for (int64_t v : s) shape[ndim++] = v;
    }

    int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
    int64_t numel() const {
        int64_t n = 1;
        for (int i = 0; i < ndim; ++i) n *= shape[i];
        return n;
    }
    size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
    // Rows = product of all but the last dimension.
    int64_t rows() const { return ndim == 0 ? 1 : numel() / shape[ndim - 1]; }
    int64_t cols() const { return ndim == 0 ? 1 : shape[ndim - 1]; }

    // Same storage, new shape with the same element count.
    Tensor view(std::initializer_list<int64_t> s) const {
        Tensor t(data, dtype, device, s);
        GRIMOIRE_CHECK(t.numel() == numel(), "view changes the element count");
        return t;
    }
    // Rows [r0, r0 + n) of the tensor seen as [rows(), cols()].
    Tensor row_slice(int64_t r0, int64_t n) const {
        GRIMOIRE_CHECK(r0 >= 0 && r0 + n <= rows());
        Tensor t(static_cast<char*>(data) + r0 * cols() * static_cast<int64_t>(dtype_size(dtype)), dtype, device,
                 {n, cols()});
        return t;
    }
    template <class T>
    T* ptr() const { return static_cast<T*>(data); }
};

}  // namespace grimoire
