# libFuzzer smoke test for the safetensors header parser (tests/fuzz/). Needs clang++ with libFuzzer
# (libclang-rt-*-dev); skipped (not registered) when clang++ is absent. With -DGRIMOIRE_FUZZ=ON and clang
# as the project compiler, fuzz_safetensors is also a regular target for long local runs:
#   ./fuzz_safetensors -max_total_time=600 corpus/
find_program(GRIMOIRE_CLANGXX NAMES clang++ clang++-18 clang++-17 clang++-16 clang++-15 clang++-14)
if(GRIMOIRE_CLANGXX)
  get_target_property(_json_inc nlohmann_json::nlohmann_json INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT _json_inc)
    set(_json_inc "")
  endif()
  file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fuzz)
  add_test(NAME fuzz_safetensors_smoke
    COMMAND ${CMAKE_COMMAND} -DCLANGXX=${GRIMOIRE_CLANGXX} -DSRC=${CMAKE_SOURCE_DIR}
            -DOUT=${CMAKE_CURRENT_BINARY_DIR}/fuzz -DSECONDS=5 "-DINCLUDES=${_json_inc}"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run_smoke.cmake)
  set_tests_properties(fuzz_safetensors_smoke PROPERTIES TIMEOUT 240 LABELS fuzz)
endif()

if(GRIMOIRE_FUZZ AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  add_executable(fuzz_safetensors ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_safetensors.cpp
    ${CMAKE_SOURCE_DIR}/src/io/safetensors.cpp ${CMAKE_SOURCE_DIR}/src/core/dtype.cpp)
  target_include_directories(fuzz_safetensors PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_options(fuzz_safetensors PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_safetensors PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_safetensors PRIVATE nlohmann_json::nlohmann_json)
endif()
