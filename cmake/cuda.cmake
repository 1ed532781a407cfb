# The CUDA backend (included by the top-level CMakeLists.txt when -DGRIMOIRE_CUDA=ON).
# grimoire_cuda is an OBJECT library folded into grimoire_lib, so everything that links the engine library
# (the CLI, tests, benchmarks) gets the CUDA backend, and grimoire_lib's GRIMOIRE_HAVE_CUDA definition makes
# make_backend("auto") pick it. Targets: sm_80 (A100) and sm_90 (H100/H200) machine code plus compute_90 PTX;
# no kernel here uses wgmma, so nothing needs compute_90a.
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "" OR
   CMAKE_CUDA_ARCHITECTURES STREQUAL "52")
  set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
endif()
# nvcc compiles the kernels as C++17 (CMake 3.25 has no CUDA20 flags for nvcc); the headers they include are C++17-clean.
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
# One CUDA runtime: the shared libcudart that grimoire_lib links (not also the static one nvcc would add).
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)

file(GLOB GRIMOIRE_CUDA_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cpp ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu
  ${CMAKE_SOURCE_DIR}/src/kernels/cuda/*.cu)

add_library(grimoire_cuda OBJECT ${GRIMOIRE_CUDA_SOURCES})
target_include_directories(grimoire_cuda PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(grimoire_cuda PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt nlohmann_json::nlohmann_json)
set(GRIMOIRE_CUDA_HOST_WARN -Wall -Wextra -Wno-unused-parameter)
set(GRIMOIRE_CUDA_NVCC_FLAGS --expt-relaxed-constexpr -lineinfo)
foreach(w ${GRIMOIRE_CUDA_HOST_WARN})
  list(APPEND GRIMOIRE_CUDA_NVCC_FLAGS -Xcompiler=${w})
endforeach()
if(GRIMOIRE_WERROR)
  list(APPEND GRIMOIRE_CUDA_HOST_WARN -Werror)
  list(APPEND GRIMOIRE_CUDA_NVCC_FLAGS -Werror=all-warnings -Xcompiler=-Werror)
endif()
target_compile_options(grimoire_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:${GRIMOIRE_CUDA_HOST_WARN}>
  $<$<COMPILE_LANGUAGE:CUDA>:${GRIMOIRE_CUDA_NVCC_FLAGS}>)

target_sources(grimoire_lib PRIVATE $<TARGET_OBJECTS:grimoire_cuda>)
target_link_libraries(grimoire_lib PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt)
target_compile_definitions(grimoire_lib PUBLIC GRIMOIRE_HAVE_CUDA)

# 27B-shaped benchmark(s): bench/gpu/*.cpp, built only here (bench/CMakeLists.txt globs bench/*.cpp).
file(GLOB GRIMOIRE_GPU_BENCHES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/bench/gpu/*.cpp)
foreach(src ${GRIMOIRE_GPU_BENCHES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_compile_options(${name} PRIVATE ${GRIMOIRE_WARN})
  target_link_libraries(${name} PRIVATE grimoire_lib)
endforeach()
# Kernel-variant benchmarks: bench/gpu/*.cu (they instantiate kernel templates themselves).
file(GLOB GRIMOIRE_GPU_CU_BENCHES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/bench/gpu/*.cu)
foreach(src ${GRIMOIRE_GPU_CU_BENCHES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${GRIMOIRE_CUDA_NVCC_FLAGS}>)
  target_link_libraries(${name} PRIVATE grimoire_lib)
endforeach()
# The warpgroup-mma probe and prototype need the Hopper arch-specific target (wgmma exists only in sm_90a code).
foreach(name probe_wgmma bench_qmv_wgmma)
  if(TARGET ${name})
    set_target_properties(${name} PROPERTIES CUDA_ARCHITECTURES OFF)
    target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--generate-code=arch=compute_90a,code=sm_90a>)
  endif()
endforeach()
