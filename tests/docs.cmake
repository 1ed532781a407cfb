# Documentation kept true: every GRIMOIRE_* variable read in src/ is listed in docs/ENVIRONMENT.md, and nothing
# listed there is gone.
add_test(NAME docs_environment_variables
  COMMAND python3 ${CMAKE_SOURCE_DIR}/tools/check_env_docs.py ${CMAKE_SOURCE_DIR})
