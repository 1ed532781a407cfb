// Embedding gather: out[t, :] = table[ids[t], :] (any float table dtype, any float out dtype).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

static __global__ void embedding_kernel(const void* __restrict__ table,  // [V, H]
                                        int tdt,
                                        const int32_t* __restrict__ ids,  // [T]
                                        int64_t V, int64_t H,
                                        void* __restrict__ out,  // [T, H]
                                        int odt) {
    pdl_enter();  // launched through launch_pdl (common.cuh)
    const int64_t t = blockIdx.y;
    int64_t id = ids[t];
    // An out-of-range id would read outside the table; clamp (the host validates ids before they get here).
    id = id < 0 ? 0 : (id >= V ? V - 1 : id);
    for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < H; c += gridDim.x * blockDim.x)
        st(out, odt, t * H + c, ld(table, tdt, id * H + c));
}

static void launch_embedding(const void* table, int tdt, const int32_t* ids, int64_t T, int64_t V, int64_t H,
                             void* out, int odt, cudaStream_t s) {
    dim3 grid(grid_for(H, 256) > 64 ? 64 : grid_for(H, 256), static_cast<unsigned>(T));
    launch_pdl(embedding_kernel, grid, dim3(256), 0, s, table, tdt, ids, V, H, out, odt);
    check_launch("embedding");
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out, cudaStream_t s) {
    if (ids.dtype != DType::I32) throw Error("cuda embedding: ids must be I32");
    if (table.ndim != 2 || out.cols() != table.dim(1) || out.rows() != ids.numel())
        throw Error("cuda embedding: shape mismatch (table [V, H], ids [T], out [T, H])");
    if (ids.numel() == 0) return;
    launch_embedding(table.data, dt_code(table.dtype, "embedding", "table"), ids.ptr<int32_t>(), ids.numel(),
                     table.dim(0), table.dim(1), out.data, dt_code(out.dtype, "embedding", "out"), s);
}

}  // namespace grimoire::cuda
