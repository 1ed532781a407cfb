# CLI tests of `grimoire run` / `grimoire inspect`: the stories260K golden text (llama2.c's own check, through
# tools/convert_llama2c.py), and errors on bad checkpoints (non-zero exit, the cause on stderr).
#
# This file is also the checker those tests run: `cmake -DMODE=... -P tests/models.cmake` (script mode), so
# stdout can be compared byte for byte and exit codes and messages checked together.

if(CMAKE_SCRIPT_MODE_FILE)
  # MODE golden: GRIMOIRE, MODEL, EXPECTED. stdout must equal EXPECTED exactly (no trailing newline added).
  # MODE error:  GRIMOIRE, CMD (run|inspect), MODEL, REGEX [, EXTRA run flag, SETUP bad_json|bad_tensors,
  #              FIXTURE, WORK].
  #              Must exit non-zero with REGEX on stderr and nothing on stdout.
  # MODE ok:     GRIMOIRE, MODEL, REGEX. `inspect` must exit 0 with REGEX on stdout.
  # MODE chat:   GRIMOIRE, MODEL, PROMPT, REGEX. `run --chat` must exit 0 with REGEX on stderr.
  # MODE ids:    GRIMOIRE, MODEL, EXPECTED_IDS. Greedy `run --output-ids` from BOS must print exactly that line.
  if(SETUP STREQUAL "bad_json")
    file(REMOVE_RECURSE ${WORK})
    file(MAKE_DIRECTORY ${WORK})
    file(WRITE ${WORK}/config.json "{\"architectures\": [\"LlamaForCausalLM\"")
    set(MODEL ${WORK})
  elseif(SETUP STREQUAL "bad_tensors")
    file(REMOVE_RECURSE ${WORK})
    file(COPY ${FIXTURE}/ DESTINATION ${WORK})
    file(WRITE ${WORK}/model.safetensors "this is not a safetensors file")
    set(MODEL ${WORK})
  endif()
  if(MODE STREQUAL "golden")
    execute_process(COMMAND ${GRIMOIRE} run --model ${MODEL} --prompt "" --max-tokens 200 --temperature 0
                            --device cpu
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    file(READ ${EXPECTED} want)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "grimoire run failed (${rc}):\n${err}")
    endif()
    if(NOT out STREQUAL want)
      message(FATAL_ERROR "stdout differs from ${EXPECTED}\n--- got ---\n${out}\n--- want ---\n${want}\n--- stderr ---\n${err}")
    endif()
  elseif(MODE STREQUAL "error")
    if(CMD STREQUAL "run")
      set(extra --prompt "hello" --max-tokens 4 --device cpu ${EXTRA})
    else()
      set(extra --device cpu)
    endif()
    execute_process(COMMAND ${GRIMOIRE} ${CMD} --model ${MODEL} ${extra}
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(rc EQUAL 0)
      message(FATAL_ERROR "grimoire ${CMD} --model ${MODEL} exited 0; stdout:\n${out}")
    endif()
    if(NOT err MATCHES "${REGEX}")
      message(FATAL_ERROR "stderr does not match '${REGEX}':\n${err}")
    endif()
    if(NOT out STREQUAL "")
      message(FATAL_ERROR "an error printed to stdout:\n${out}")
    endif()
  elseif(MODE STREQUAL "ok")
    execute_process(COMMAND ${GRIMOIRE} inspect --model ${MODEL} --device cpu
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0 OR NOT out MATCHES "${REGEX}")
      message(FATAL_ERROR "inspect (${rc}) output does not match '${REGEX}':\n${out}\n${err}")
    endif()
  elseif(MODE STREQUAL "chat")
    execute_process(COMMAND ${GRIMOIRE} run --model ${MODEL} --chat --prompt "${PROMPT}" --max-tokens 1
                            --temperature 0 --device cpu
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0 OR NOT err MATCHES "${REGEX}")
      message(FATAL_ERROR "run --chat (${rc}): stderr does not match '${REGEX}':\n${err}")
    endif()
  elseif(MODE STREQUAL "ids")
    list(LENGTH EXPECTED_IDS n)
    string(REPLACE ";" " " want "${EXPECTED_IDS}")
    execute_process(COMMAND ${GRIMOIRE} run --model ${MODEL} --prompt "" --max-tokens ${n} --temperature 0
                            --output-ids --device cpu
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0 OR NOT out STREQUAL "${want}\n")
      message(FATAL_ERROR "run --output-ids (${rc}) printed '${out}', want '${want}'\n${err}")
    endif()
  else()
    message(FATAL_ERROR "tests/models.cmake: unknown MODE '${MODE}'")
  endif()
  return()
endif()

find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(_stories ${CMAKE_SOURCE_DIR}/../shared/data/models/stories260K)
set(_converted ${CMAKE_BINARY_DIR}/models/stories260K)

# The conversion runs in the tests (from ../shared; nothing converted is committed). Standard library only.
add_test(NAME models_convert_stories260K
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/convert_llama2c.py ${_stories}/stories260K.bin
                 ${_stories}/tok512.bin ${_converted})
set_tests_properties(models_convert_stories260K PROPERTIES FIXTURES_SETUP stories260K)

add_test(NAME models_stories260K_greedy_200
         COMMAND ${CMAKE_COMMAND} -DMODE=golden -DGRIMOIRE=$<TARGET_FILE:grimoire> -DMODEL=${_converted}
                 -DEXPECTED=${_stories}/expected_greedy_200.txt -P ${CMAKE_CURRENT_LIST_FILE})
set_tests_properties(models_stories260K_greedy_200 PROPERTIES FIXTURES_REQUIRED stories260K)

# The first greedy ids after BOS, from transformers' LlamaForCausalLM on the converted checkpoint.
add_test(NAME models_stories260K_output_ids
         COMMAND ${CMAKE_COMMAND} -DMODE=ids -DGRIMOIRE=$<TARGET_FILE:grimoire> -DMODEL=${_converted}
                 "-DEXPECTED_IDS=403;407;261;378;432;383;286;261;376;298;315;421" -P ${CMAKE_CURRENT_LIST_FILE})
set_tests_properties(models_stories260K_output_ids PROPERTIES FIXTURES_REQUIRED stories260K)

add_test(NAME models_cli_missing_dir
         COMMAND ${CMAKE_COMMAND} -DMODE=error -DCMD=run -DMODEL=${CMAKE_BINARY_DIR}/models/no_such_model
                 -DREGEX=no_such_model.*not -DGRIMOIRE=$<TARGET_FILE:grimoire> -P ${CMAKE_CURRENT_LIST_FILE})
add_test(NAME models_cli_bad_config
         COMMAND ${CMAKE_COMMAND} -DMODE=error -DCMD=inspect -DSETUP=bad_json -DWORK=${CMAKE_BINARY_DIR}/models/bad_json
                 "-DREGEX=config.json: not valid JSON" -DGRIMOIRE=$<TARGET_FILE:grimoire> -P ${CMAKE_CURRENT_LIST_FILE})
add_test(NAME models_cli_bad_tensor_file
         COMMAND ${CMAKE_COMMAND} -DMODE=error -DCMD=run -DSETUP=bad_tensors -DFIXTURE=${CMAKE_SOURCE_DIR}/tests/fixtures/llama
                 -DWORK=${CMAKE_BINARY_DIR}/models/bad_tensors -DREGEX=model.safetensors
                 -DGRIMOIRE=$<TARGET_FILE:grimoire> -P ${CMAKE_CURRENT_LIST_FILE})
add_test(NAME models_cli_chat_without_template
         COMMAND ${CMAKE_COMMAND} -DMODE=error -DCMD=run -DMODEL=${_converted} -DEXTRA=--chat "-DREGEX=no chat template"
                 -DGRIMOIRE=$<TARGET_FILE:grimoire> -P ${CMAKE_CURRENT_LIST_FILE})
set_tests_properties(models_cli_chat_without_template PROPERTIES FIXTURES_REQUIRED stories260K)
add_test(NAME models_cli_inspect
         COMMAND ${CMAKE_COMMAND} -DMODE=ok -DMODEL=${CMAKE_SOURCE_DIR}/tests/fixtures/qwen3
                 "-DREGEX=Qwen3ForCausalLM.*parameters: +[0-9.]+K \\(164288\\).*BF16"
                 -DGRIMOIRE=$<TARGET_FILE:grimoire> -P ${CMAKE_CURRENT_LIST_FILE})
# A quantized checkpoint says what its projections are: the two layers' 14 in GPTQ int4, the lm_head BF16.
add_test(NAME models_cli_inspect_quant
         COMMAND ${CMAKE_COMMAND} -DMODE=ok -DMODEL=${CMAKE_SOURCE_DIR}/tests/fixtures/quant/qwen3_gptq
                 "-DREGEX=linears: +14 gptq int4 g32 g_idx, 1 BF16"
                 -DGRIMOIRE=$<TARGET_FILE:grimoire> -P ${CMAKE_CURRENT_LIST_FILE})
# --chat renders the demo model's ChatML template: transformers' apply_chat_template([{user: "Hello there"}],
# add_generation_prompt=True) on models/demo gives 19 ids (incl. the empty think block), so must we.
add_test(NAME models_cli_chat_demo
         COMMAND ${CMAKE_COMMAND} -DMODE=chat -DGRIMOIRE=$<TARGET_FILE:grimoire> -DMODEL=${CMAKE_SOURCE_DIR}/models/demo
                 "-DPROMPT=Hello there" "-DREGEX=prompt: 19 tokens" -P ${CMAKE_CURRENT_LIST_FILE})
