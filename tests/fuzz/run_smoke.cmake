# Builds tests/fuzz/fuzz_safetensors.cpp with clang++ -fsanitize=fuzzer,address and runs it corpus-free for a
# few seconds. Invoked by the fuzz_safetensors_smoke ctest (tests/fuzz.cmake) with -DCLANGXX, -DSRC, -DOUT,
# -DSECONDS, -DINCLUDES (a ;-list).
set(sources ${SRC}/tests/fuzz/fuzz_safetensors.cpp ${SRC}/src/io/safetensors.cpp ${SRC}/src/core/dtype.cpp)
set(incs -I${SRC}/src)
foreach(i ${INCLUDES})
  list(APPEND incs -I${i})
endforeach()
execute_process(
  COMMAND ${CLANGXX} -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
          ${incs} ${sources} -o ${OUT}/fuzz_safetensors
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the fuzzer failed (${rc})")
endif()
execute_process(
  COMMAND ${OUT}/fuzz_safetensors -max_total_time=${SECONDS} -seed=1 -max_len=4096 -rss_limit_mb=2048
          -artifact_prefix=${OUT}/
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the fuzzer found a failure (exit ${rc}); the crashing input is in ${OUT}/")
endif()
