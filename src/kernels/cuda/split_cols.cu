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
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / C, c = i % C;
        int p = 0;
        while (p + 1 < a.n && c >= a.c0[p + 1]) ++p;
        const int64_t w = a.c0[p + 1] - a.c0[p];
        st(a.out[p], dt, r * w + (c - a.c0[p]), ld(src, dt, i));
    }
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
    split_cols_kernel<<<grid_for(R * C, 256), 256, 0, s>>>(src.data, dt_code(src.dtype, "split_cols", "src"), C,
                                                           R * C, a);
    check_launch("split_cols");
}

}  // namespace grimoire::cuda
