# libFuzzer smoke tests (tests/fuzz/): each fuzzer is built with clang++ and run for a few seconds by
# tests/fuzz/run_smoke.cmake. Needs clang++ with libFuzzer (libclang-rt-*-dev); not registered when clang++ is
# absent. With -DGRIMOIRE_FUZZ=ON and clang as the project compiler, fuzz_safetensors is also a regular target
# for long local runs:
#   ./fuzz_safetensors -max_total_time=600 corpus/
find_program(GRIMOIRE_CLANGXX NAMES clang++ clang++-18 clang++-17 clang++-16 clang++-15 clang++-14)
if(GRIMOIRE_CLANGXX)
  get_target_property(_json_inc nlohmann_json::nlohmann_json INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT _json_inc)
    set(_json_inc "")
  endif()
  # grimoire_fuzz_smoke(NAME <fuzzer> SOURCES <src/...> [CORPUS <dir>] SECONDS <s> TIMEOUT <s>): the ctest
  # ${NAME}_smoke builds tests/fuzz/${NAME}.cpp with SOURCES and runs it for SECONDS.
  function(grimoire_fuzz_smoke)
    cmake_parse_arguments(F "" "NAME;CORPUS;SECONDS;TIMEOUT" "SOURCES" ${ARGN})
    file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/${F_NAME})
    add_test(NAME ${F_NAME}_smoke
      COMMAND ${CMAKE_COMMAND} -DCLANGXX=${GRIMOIRE_CLANGXX} -DSRC=${CMAKE_SOURCE_DIR}
              -DOUT=${CMAKE_CURRENT_BINARY_DIR}/${F_NAME} -DNAME=${F_NAME} "-DSOURCES=${F_SOURCES}"
              "-DCORPUS=${F_CORPUS}" -DSECONDS=${F_SECONDS} "-DINCLUDES=${_json_inc}"
              -P ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run_smoke.cmake)
    set_tests_properties(${F_NAME}_smoke PROPERTIES TIMEOUT ${F_TIMEOUT} LABELS fuzz)
  endfunction()

  # The safetensors header parser.
  grimoire_fuzz_smoke(NAME fuzz_safetensors SOURCES src/io/safetensors.cpp src/core/dtype.cpp
                      SECONDS 5 TIMEOUT 240)
  # The server's request parsers and output parsers, from the seed corpus.
  grimoire_fuzz_smoke(NAME fuzz_request
                      SOURCES src/server/request.cpp src/server/api_error.cpp src/server/output_parser.cpp
                              src/server/stop_matcher.cpp src/server/reasoning.cpp src/server/tool_calls.cpp
                      CORPUS tests/fuzz/request_corpus SECONDS 10 TIMEOUT 300)
endif()

if(GRIMOIRE_FUZZ AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  add_executable(fuzz_safetensors ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_safetensors.cpp
    ${CMAKE_SOURCE_DIR}/src/io/safetensors.cpp ${CMAKE_SOURCE_DIR}/src/core/dtype.cpp)
  target_include_directories(fuzz_safetensors PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_options(fuzz_safetensors PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_safetensors PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_safetensors PRIVATE nlohmann_json::nlohmann_json)
endif()
