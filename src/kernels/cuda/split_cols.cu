// src [R, C] -> out_i [R, n_i] for consecutive column ranges (see split_cols.h).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/split_cols.h"

namespace grimoire::cuda {

namespace {

struct SplitArgs {
    void* out[kMaxSplitCols];
    int64_t c0[kMaxSplitCols + 1];  // part p covers columns [c0[p], c0[p + 1])
    int n;
};

// One thread per source element: reads are coalesced along the row, each write lands in its part's row.
__global__ void split_cols_kernel(const void* src, int dt, int64_t C, int64_t total, SplitArgs a) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / C, c = i % C;
        int p = 0;
        while (p + 1 < a.n && c >= a.c0[p + 1]) ++p;
        const int64_t w = a.c0[p + 1] - a.c0[p];
        st(a.out[p], dt, r * w + (c - a.c0[p]), ld(src, dt, i));
    }
}

// Prompt-sized splits (a stacked projection's [T, N] output): 16-byte vectors, one row per blockIdx.y, so no
// 64-bit division per element. Offsets and widths are in vectors.
__global__ void split_cols_vec_kernel(const uint4* __restrict__ src, int64_t C, SplitArgs a) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    const int64_t r = blockIdx.y;
    for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < C;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        int p = 0;
        while (p + 1 < a.n && c >= a.c0[p + 1]) ++p;
        const int64_t w = a.c0[p + 1] - a.c0[p];
        static_cast<uint4*>(a.out[p])[r * w + (c - a.c0[p])] = src[r * C + c];
    }
}

bool vec_ok(const void* p, int64_t cols, size_t es) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (static_cast<size_t>(cols) * es) % 16 == 0;
}

}  // namespace

void split_cols(const Tensor& src, const Tensor* outs, int n_outs, cudaStream_t s) {
    const int64_t R = src.rows(), C = src.cols();
    if (n_outs < 1 || n_outs > kMaxSplitCols)
        throw Error("cuda split_cols: 1.." + std::to_string(kMaxSplitCols) + " outputs, got " +
                    std::to_string(n_outs));
    SplitArgs a{};
    a.n = n_outs;
    for (int p = 0; p < n_outs; ++p) {
        if (outs[p].rows() != R || outs[p].dtype != src.dtype)
            throw Error("cuda split_cols: every output must have src's rows and dtype");
        a.out[p] = outs[p].data;
        a.c0[p + 1] = a.c0[p] + outs[p].cols();
    }
    if (a.c0[a.n] != C) throw Error("cuda split_cols: the outputs' columns do not add up to src's");
    if (R * C == 0) return;
    const size_t es = dtype_size(src.dtype);
    bool vec = R <= 65535 && vec_ok(src.data, C, es);
    for (int p = 0; p < n_outs; ++p) vec = vec && vec_ok(outs[p].data, outs[p].cols(), es);
    if (vec) {
        const int64_t per = 16 / static_cast<int64_t>(es);
        SplitArgs v = a;
        for (int p = 0; p <= n_outs; ++p) v.c0[p] = a.c0[p] / per;
        const int64_t Cv = C / per;
        const dim3 grid(static_cast<unsigned>((Cv + 255) / 256), static_cast<unsigned>(R));
        launch_pdl(split_cols_vec_kernel, dim3(grid), dim3(256), 0, s, static_cast<const uint4*>(src.data),
                   Cv, v);
        check_launch("split_cols");
        return;
    }
    launch_pdl(split_cols_kernel, dim3(grid_for(R * C, 256)), dim3(256), 0, s, src.data,
               dt_code(src.dtype, "split_cols", "src"), C, R * C, a);
    check_launch("split_cols");
}

}  // namespace grimoire::cuda
