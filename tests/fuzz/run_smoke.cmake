# Builds one libFuzzer target with clang++ -fsanitize=fuzzer,address,undefined and runs it for a few seconds
# (from a copy of its seed corpus when it has one). Invoked by the *_smoke ctests registered in tests/fuzz.cmake
# with -DCLANGXX, -DSRC, -DOUT, -DNAME (the fuzzer: tests/fuzz/${NAME}.cpp), -DSOURCES (;-list of project sources
# relative to SRC), -DCORPUS (seed corpus dir relative to SRC, or empty), -DSECONDS, -DINCLUDES (a ;-list).
set(sources ${SRC}/tests/fuzz/${NAME}.cpp)
foreach(f ${SOURCES})
  list(APPEND sources ${SRC}/${f})
endforeach()
set(incs -I${SRC}/src)
foreach(i ${INCLUDES})
  list(APPEND incs -I${i})
endforeach()
execute_process(
  COMMAND ${CLANGXX} -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
          ${incs} ${sources} -o ${OUT}/${NAME}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building ${NAME} failed (${rc})")
endif()
set(corpus_dir "")
if(CORPUS)
  # Work on a copy: libFuzzer adds what it finds to the first corpus directory.
  get_filename_component(corpus_name ${CORPUS} NAME)
  file(REMOVE_RECURSE ${OUT}/${corpus_name})
  file(COPY ${SRC}/${CORPUS} DESTINATION ${OUT})
  set(corpus_dir ${OUT}/${corpus_name})
endif()
execute_process(
  COMMAND ${OUT}/${NAME} -max_total_time=${SECONDS} -seed=1 -max_len=4096 -rss_limit_mb=2048 -timeout=10
          -artifact_prefix=${OUT}/ ${corpus_dir}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NAME} found a failure (exit ${rc}); the crashing input is in ${OUT}/")
endif()
