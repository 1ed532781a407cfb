# CLI checks for `grimoire tokenize` on the real Qwen3 tokenizer files in ../shared.
#
# Included by tests/CMakeLists.txt, this file registers the tests; run with `cmake -P` it is the test itself:
#   MODE=vector: feeds the last case of ggml-vocab-qwen2.inp (the long mixed-script one) on stdin and compares
#                the printed ids with the last line of ggml-vocab-qwen2.out;
#   MODE=error:  a missing --model directory must exit non-zero with the directory named on stderr.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  set(_tok_shared ${CMAKE_SOURCE_DIR}/../shared)
  add_test(NAME tokenizer_cli_qwen2_vector
    COMMAND ${CMAKE_COMMAND} -DMODE=vector -DBIN=$<TARGET_FILE:grimoire> -DSHARED=${_tok_shared}
            -DTMP=${CMAKE_CURRENT_BINARY_DIR}/tokenizer_cli_input.txt -P ${CMAKE_CURRENT_LIST_FILE})
  add_test(NAME tokenizer_cli_missing_dir
    COMMAND ${CMAKE_COMMAND} -DMODE=error -DBIN=$<TARGET_FILE:grimoire> -P ${CMAKE_CURRENT_LIST_FILE})
  return()
endif()

cmake_minimum_required(VERSION 3.25)  # script mode: modern list() semantics
if(MODE STREQUAL "vector")
  set(_vec ${SHARED}/data/tokenizer-tests/ggml-vocab-qwen2)
  file(READ ${_vec}.inp _inp)
  set(_sep "\n__ggml_vocab_test__\n")
  # The file ends with a separator: the last case lies between the last two separators.
  string(FIND "${_inp}" "${_sep}" _end REVERSE)
  string(SUBSTRING "${_inp}" 0 ${_end} _head)
  string(FIND "${_head}" "${_sep}" _begin REVERSE)
  string(LENGTH "${_sep}" _seplen)
  math(EXPR _begin "${_begin} + ${_seplen}")
  math(EXPR _len "${_end} - ${_begin}")
  string(SUBSTRING "${_inp}" ${_begin} ${_len} _case)
  file(WRITE ${TMP} "${_case}")
  file(STRINGS ${_vec}.out _lines)
  list(LENGTH _lines _n)
  math(EXPR _last "${_n} - 1")
  list(GET _lines ${_last} _want)
  string(STRIP "${_want}" _want)
  execute_process(COMMAND ${BIN} tokenize --model ${SHARED}/data/tokenizers/qwen3
    INPUT_FILE ${TMP} OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc)
  string(STRIP "${_out}" _out)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "grimoire tokenize failed (${_rc}): ${_err}")
  endif()
  if(NOT _out STREQUAL _want)
    message(FATAL_ERROR "ids differ\n got: ${_out}\nwant: ${_want}")
  endif()
  message(STATUS "tokenize: the last qwen2 vector matches")
elseif(MODE STREQUAL "error")
  execute_process(COMMAND ${BIN} tokenize --model /nonexistent/grimoire-tokenizer
    INPUT_FILE /dev/null OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 OR NOT _err MATCHES "/nonexistent/grimoire-tokenizer")
    message(FATAL_ERROR "expected a non-zero exit naming the directory, got ${_rc}: ${_err}")
  endif()
else()
  message(FATAL_ERROR "tokenizer.cmake: unknown MODE '${MODE}'")
endif()
