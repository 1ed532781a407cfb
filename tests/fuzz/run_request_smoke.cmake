# Builds tests/fuzz/fuzz_request.cpp with clang++ -fsanitize=fuzzer,address,undefined and runs it for a few
# seconds from the seed corpus. Invoked by the fuzz_request_smoke ctest (tests/fuzz_server.cmake) with
# -DCLANGXX, -DSRC, -DOUT, -DSECONDS, -DINCLUDES (a ;-list).
set(sources ${SRC}/tests/fuzz/fuzz_request.cpp)
foreach(f request api_error output_parser stop_matcher reasoning tool_calls)
  list(APPEND sources ${SRC}/src/server/${f}.cpp)
endforeach()
set(incs -I${SRC}/src)
foreach(i ${INCLUDES})
  list(APPEND incs -I${i})
endforeach()
execute_process(
  COMMAND ${CLANGXX} -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
          ${incs} ${sources} -o ${OUT}/fuzz_request
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the fuzzer failed (${rc})")
endif()
# Work on a copy: libFuzzer adds what it finds to the first corpus directory.
file(REMOVE_RECURSE ${OUT}/request_corpus)
file(COPY ${SRC}/tests/fuzz/request_corpus DESTINATION ${OUT})
execute_process(
  COMMAND ${OUT}/fuzz_request -max_total_time=${SECONDS} -seed=1 -max_len=4096 -rss_limit_mb=2048
          -timeout=10 -artifact_prefix=${OUT}/ ${OUT}/request_corpus
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the fuzzer found a failure (exit ${rc}); the crashing input is in ${OUT}/")
endif()
