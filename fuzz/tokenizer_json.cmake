# fuzz_tokenizer_json: libFuzzer target for the tokenizer.json reader.
# Included from fuzz/CMakeLists.txt (after its clang check); kvad_tokenizer's
# sources are compiled into the target for coverage. Seed corpus:
# tests/fixtures/hf_tokenizer/seeds, seeds-gguf and broken. kvad_hub: the
# sha256 the tokenizer's GGUF keys stamp (hf_tokenizer.cpp).
find_package(nlohmann_json CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(ICU_UC REQUIRED IMPORTED_TARGET icu-uc)
get_target_property(_tok_dir kvad_tokenizer SOURCE_DIR)
get_target_property(_tok_sources kvad_tokenizer SOURCES)
list(TRANSFORM _tok_sources PREPEND ${_tok_dir}/)
add_executable(fuzz_tokenizer_json ${CMAKE_CURRENT_LIST_DIR}/fuzz_tokenizer_json.cpp ${_tok_sources})
target_include_directories(fuzz_tokenizer_json PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_tokenizer_json PRIVATE kvad_io kvad_hub kvad_base PkgConfig::PCRE2 PkgConfig::ICU_UC nlohmann_json::nlohmann_json)
target_compile_options(fuzz_tokenizer_json PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_tokenizer_json PRIVATE -fsanitize=fuzzer)
