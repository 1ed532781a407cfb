#include "backend/cuda/cuda_util.h"

#include <cstdlib>

#include "kernels/cuda/kernels.h"

namespace grimoire::cuda {

void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
    throw Error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + what +
                " at " + file + ":" + std::to_string(line));
}

void throw_cublas(cublasStatus_t e, const char* what, const char* file, int line) {
    throw Error(std::string("cuBLAS error ") + cublasGetStatusName(e) + " in " + what + " at " + file + ":" +
                std::to_string(line));
}

// Declared in kernels/cuda/common.cuh: every launcher calls it right after its launch.
void check_launch(const char* op) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        throw Error(std::string("CUDA kernel launch failed in ") + op + ": " + cudaGetErrorString(e));
}

bool device_is_hopper() {
    static const bool on = [] {
        int dev = 0, major = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        return major >= 9;
    }();
    return on;
}

// Declared in kernels/cuda/common.cuh: whether launch_pdl sets the programmatic-launch attribute.
bool pdl_enabled() {
    static const bool on = [] {
        const char* e = std::getenv("GRIMOIRE_PDL");
        return device_is_hopper() && !(e && e[0] == '0');
    }();
    return on;
}

// Declared in kernels/cuda/common.cuh: whether a kernel may let its dependent launch before its own wait.
bool pdl_ahead_enabled() {
    static const bool on = [] {
        const char* e = std::getenv("GRIMOIRE_PDL_AHEAD");
        return pdl_enabled() && !(e && e[0] == '0');
    }();
    return on;
}

bool pdl_ahead_mixer_enabled() {
    static const bool on = [] {
        const char* e = std::getenv("GRIMOIRE_PDL_AHEAD_MIXER");
        return pdl_ahead_enabled() && !(e && e[0] == '0');
    }();
    return on;
}

}  // namespace grimoire::cuda
