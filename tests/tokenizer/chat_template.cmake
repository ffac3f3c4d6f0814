# test_chat_template: Jinja2 chat templates against Python jinja2 renderings
# (tests/fixtures/templates, made by tools/make_template_fixtures.py).
# Included from tests/tokenizer/CMakeLists.txt.
find_package(nlohmann_json CONFIG REQUIRED)
kvad_test(test_chat_template ${CMAKE_CURRENT_LIST_DIR}/test_chat_template.cpp
  LIBS kvad_chat_template nlohmann_json::nlohmann_json)
