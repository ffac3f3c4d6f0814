# fuzz_tool_calls: libFuzzer target for the tool-call and reasoning parser
# (src/server/tool_calls.h). Included from fuzz/CMakeLists.txt (after its
# clang check); tool_calls.cpp is compiled into the target for coverage.
# Seed corpus: tests/fixtures/tool_calls/broken (a leading flags byte and a
# chunk-size byte are taken from each file's first two bytes).
find_package(nlohmann_json CONFIG REQUIRED)
add_executable(fuzz_tool_calls ${CMAKE_CURRENT_LIST_DIR}/fuzz_tool_calls.cpp
  ${PROJECT_SOURCE_DIR}/src/server/tool_calls.cpp)
target_include_directories(fuzz_tool_calls PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_tool_calls PRIVATE nlohmann_json::nlohmann_json)
target_compile_options(fuzz_tool_calls PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_tool_calls PRIVATE -fsanitize=fuzzer)
