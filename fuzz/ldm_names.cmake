# fuzz_ldm_names: libFuzzer target for the single-file image checkpoints'
# layout detection and name table (see the .cpp). Included from
# fuzz/CMakeLists.txt (after its clang check). Seed corpus:
# tests/fixtures/ldm_names_seeds.
add_executable(fuzz_ldm_names ${CMAKE_CURRENT_LIST_DIR}/fuzz_ldm_names.cpp)
target_include_directories(fuzz_ldm_names PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_ldm_names PRIVATE kvad_model)
target_compile_options(fuzz_ldm_names PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_ldm_names PRIVATE -fsanitize=fuzzer)
