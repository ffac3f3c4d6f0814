# fuzz_scheduler_config: libFuzzer target for scheduler_config.json through the
# diffusion schedulers (see the .cpp). Included from fuzz/CMakeLists.txt
# (after its clang check). Seed corpus: tests/fixtures/scheduler_config_seeds.
add_executable(fuzz_scheduler_config ${CMAKE_CURRENT_LIST_DIR}/fuzz_scheduler_config.cpp)
target_include_directories(fuzz_scheduler_config PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_scheduler_config PRIVATE kvad_engine)
target_compile_options(fuzz_scheduler_config PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_scheduler_config PRIVATE -fsanitize=fuzzer)
