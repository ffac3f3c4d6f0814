# fuzz_safetensors: libFuzzer target for the safetensors reader and the
# sharded-checkpoint index parser (src/io/safetensors.h). Included from
# fuzz/CMakeLists.txt (after its clang check); safetensors.cpp is compiled
# into the target for coverage. Seed corpus: tests/fixtures/safetensors
# (valid/, broken/, broken_index/).
find_package(nlohmann_json CONFIG REQUIRED)
add_executable(fuzz_safetensors ${CMAKE_CURRENT_LIST_DIR}/fuzz_safetensors.cpp
  ${PROJECT_SOURCE_DIR}/src/io/safetensors.cpp)
target_include_directories(fuzz_safetensors PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_safetensors PRIVATE kvad_base nlohmann_json::nlohmann_json)
target_compile_options(fuzz_safetensors PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_safetensors PRIVATE -fsanitize=fuzzer)
