# The server's pytest suite (tests/server): starts the real `grimoire serve` on free ports with a test
# checkpoint made from ../shared (stories260K + the Qwen3 chat template) and drives it with the official openai
# client, raw HTTP and llama-benchy (all pinned in tests/requirements.txt). GRIMOIRE_PYTHON picks another
# interpreter for local runs.
if(NOT DEFINED ENV{GRIMOIRE_PYTHON})
  set(_server_py python3)
else()
  set(_server_py $ENV{GRIMOIRE_PYTHON})
endif()
add_test(NAME server_pytest
  COMMAND ${_server_py} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/server
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(server_pytest PROPERTIES
  ENVIRONMENT "GRIMOIRE_BIN=$<TARGET_FILE:grimoire>;GRIMOIRE_SHARED=${CMAKE_SOURCE_DIR}/../shared"
  TIMEOUT 900
  # Timing-sensitive (cancellation within a bound, llama-benchy rates): run with nothing beside it.
  RUN_SERIAL TRUE)
