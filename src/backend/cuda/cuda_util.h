// Error checks for CUDA runtime and cuBLAS calls: a failure throws grimoire::Error naming the call site.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "core/error.h"

namespace grimoire::cuda {

[[noreturn]] void throw_cuda(cudaError_t e, const char* what, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t e, const char* what, const char* file, int line);

}  // namespace grimoire::cuda

#define GRIMOIRE_CUDA_CHECK(call)                                                                 \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) ::grimoire::cuda::throw_cuda(e_, #call, __FILE__, __LINE__);       \
    } while (0)
#define GRIMOIRE_CUBLAS_CHECK(call)                                                               \
    do {                                                                                          \
        cublasStatus_t e_ = (call);                                                               \
        if (e_ != CUBLAS_STATUS_SUCCESS) ::grimoire::cuda::throw_cublas(e_, #call, __FILE__, __LINE__); \
    } while (0)
