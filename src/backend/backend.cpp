// Backend factories. The CUDA build (GRIMOIRE_HAVE_CUDA) defines make_cuda_backend in src/backend/cuda.
#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace grimoire {

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

#ifndef GRIMOIRE_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
    if (why) *why = "this build has no CUDA backend (configure with -DGRIMOIRE_CUDA=ON)";
    return nullptr;
}
#endif

std::unique_ptr<Backend> make_backend(const std::string& which) {
    if (which == "cpu") return make_cpu_backend();
    if (which == "cuda" || which == "auto") {
        std::string why;
        if (auto be = make_cuda_backend(&why)) return be;
        if (which == "cuda") throw Error("backend 'cuda' is not available: " + why);
        return make_cpu_backend();
    }
    throw Error("unknown backend '" + which + "' (expected auto, cpu or cuda)");
}

}  // namespace grimoire
