# fuzz_hf_config: libFuzzer target for config.json through the HF view and
# the architecture loaders (see the .cpp). Included from fuzz/CMakeLists.txt
# (after its clang check). Seed corpus: tests/fixtures/hf_config_seeds (made
# by tools/make_model_hparams_seeds.py).
find_package(nlohmann_json CONFIG REQUIRED)
add_executable(fuzz_hf_config ${CMAKE_CURRENT_LIST_DIR}/fuzz_hf_config.cpp)
target_include_directories(fuzz_hf_config PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_hf_config PRIVATE kvad_engine kvad_model kvad_io nlohmann_json::nlohmann_json)
target_compile_definitions(fuzz_hf_config PRIVATE KVAD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
target_compile_options(fuzz_hf_config PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_hf_config PRIVATE -fsanitize=fuzzer)
