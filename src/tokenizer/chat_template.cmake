# kvad_chat_template: the sandboxed Jinja2 chat-template engine (chat_template.h).
# Depends only on kvad_base and nlohmann_json, not on the tokenizer library.
# Included from src/tokenizer/CMakeLists.txt.
find_package(nlohmann_json CONFIG REQUIRED)
add_library(kvad_chat_template STATIC
  ${CMAKE_CURRENT_LIST_DIR}/chat_template.cpp
  ${CMAKE_CURRENT_LIST_DIR}/jinja_value.cpp
  ${CMAKE_CURRENT_LIST_DIR}/jinja_parse.cpp
  ${CMAKE_CURRENT_LIST_DIR}/jinja_eval.cpp
  ${CMAKE_CURRENT_LIST_DIR}/jinja_builtins.cpp)
target_include_directories(kvad_chat_template PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(kvad_chat_template PUBLIC kvad_base nlohmann_json::nlohmann_json)
