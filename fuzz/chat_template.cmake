# fuzz_chat_template: libFuzzer target for the chat-template engine. Included
# from fuzz/CMakeLists.txt (after its clang check). The engine's sources are
# compiled into the target so they get coverage instrumentation.
find_package(nlohmann_json CONFIG REQUIRED)
add_executable(fuzz_chat_template ${CMAKE_CURRENT_LIST_DIR}/fuzz_chat_template.cpp
  ${PROJECT_SOURCE_DIR}/src/tokenizer/chat_template.cpp
  ${PROJECT_SOURCE_DIR}/src/tokenizer/jinja_value.cpp
  ${PROJECT_SOURCE_DIR}/src/tokenizer/jinja_parse.cpp
  ${PROJECT_SOURCE_DIR}/src/tokenizer/jinja_eval.cpp
  ${PROJECT_SOURCE_DIR}/src/tokenizer/jinja_builtins.cpp)
target_include_directories(fuzz_chat_template PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_chat_template PRIVATE kvad_base nlohmann_json::nlohmann_json)
target_compile_options(fuzz_chat_template PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_chat_template PRIVATE -fsanitize=fuzzer)
