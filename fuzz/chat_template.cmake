# fuzz_chat_template: libFuzzer target for the chat-template engine. Included
# from fuzz/CMakeLists.txt (after its clang check). The engine's sources
# (kvad_jinja's, src/jinja) are compiled into the target so they get coverage
# instrumentation.
find_package(nlohmann_json CONFIG REQUIRED)
get_target_property(_jinja_dir kvad_jinja SOURCE_DIR)
get_target_property(_jinja_sources kvad_jinja SOURCES)
list(TRANSFORM _jinja_sources PREPEND ${_jinja_dir}/)
add_executable(fuzz_chat_template ${CMAKE_CURRENT_LIST_DIR}/fuzz_chat_template.cpp ${_jinja_sources})
target_include_directories(fuzz_chat_template PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_chat_template PRIVATE kvad_base nlohmann_json::nlohmann_json)
target_compile_options(fuzz_chat_template PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_chat_template PRIVATE -fsanitize=fuzzer)
