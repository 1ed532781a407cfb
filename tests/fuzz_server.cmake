# libFuzzer smoke test for the server's request parsers and output parsers (tests/fuzz/fuzz_request.cpp).
# Needs clang++ with libFuzzer; not registered when clang++ is absent.
find_program(GRIMOIRE_SERVER_CLANGXX NAMES clang++ clang++-18 clang++-17 clang++-16 clang++-15 clang++-14)
if(GRIMOIRE_SERVER_CLANGXX)
  get_target_property(_srv_json_inc nlohmann_json::nlohmann_json INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT _srv_json_inc)
    set(_srv_json_inc "")
  endif()
  file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fuzz_server)
  add_test(NAME fuzz_request_smoke
    COMMAND ${CMAKE_COMMAND} -DCLANGXX=${GRIMOIRE_SERVER_CLANGXX} -DSRC=${CMAKE_SOURCE_DIR}
            -DOUT=${CMAKE_CURRENT_BINARY_DIR}/fuzz_server -DSECONDS=10 "-DINCLUDES=${_srv_json_inc}"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run_request_smoke.cmake)
  set_tests_properties(fuzz_request_smoke PROPERTIES TIMEOUT 300 LABELS fuzz)
endif()
