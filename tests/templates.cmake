# Chat templates: grimoire's Jinja interpreter against Python jinja2 (pinned in tests/requirements.txt), byte for
# byte, over every real template in ../shared/data/templates and the cases in tests/templates/cases.json.
add_executable(render_template ${CMAKE_CURRENT_SOURCE_DIR}/templates/render_template.cpp)
target_compile_options(render_template PRIVATE ${GRIMOIRE_WARN})
target_link_libraries(render_template PRIVATE grimoire_lib)

# python3 as CI's tools/setup.sh installs it (jinja2 and pytest from tests/requirements.txt).
add_test(NAME templates_match_jinja2
  COMMAND python3 -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/templates
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(templates_match_jinja2 PROPERTIES
  ENVIRONMENT "GRIMOIRE_RENDER_TEMPLATE=$<TARGET_FILE:render_template>;GRIMOIRE_SHARED=${CMAKE_SOURCE_DIR}/../shared"
  TIMEOUT 300)
