# fuzz_hub_response: libFuzzer target for the Hub answer parsers (src/hub/client.h).
# Included from fuzz/CMakeLists.txt (after its clang check).
add_executable(fuzz_hub_response ${CMAKE_CURRENT_LIST_DIR}/fuzz_hub_response.cpp)
target_link_libraries(fuzz_hub_response PRIVATE kvad_hub)
target_compile_options(fuzz_hub_response PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_hub_response PRIVATE -fsanitize=fuzzer)
