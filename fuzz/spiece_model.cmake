# fuzz_spiece_model: libFuzzer target for the SentencePiece model reader
# (tokenizer/spiece_model.h) and the T5 tokenizer built from it
# (tokenizer/t5.h, the precompiled charsmap of tokenizer/precompiled.h).
# Included from fuzz/CMakeLists.txt (after its clang check); kvad_tokenizer's
# sources are compiled into the target for coverage. Seed corpus:
# tests/fixtures/t5_tokenizer/broken (and the fixture's spiece.model.gz, unzipped).
find_package(nlohmann_json CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(ICU_UC REQUIRED IMPORTED_TARGET icu-uc)
get_target_property(_tok_dir kvad_tokenizer SOURCE_DIR)
get_target_property(_tok_sources kvad_tokenizer SOURCES)
list(TRANSFORM _tok_sources PREPEND ${_tok_dir}/)
add_executable(fuzz_spiece_model ${CMAKE_CURRENT_LIST_DIR}/fuzz_spiece_model.cpp ${_tok_sources})
target_include_directories(fuzz_spiece_model PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_spiece_model PRIVATE kvad_io kvad_hub kvad_base PkgConfig::PCRE2 PkgConfig::ICU_UC
                      nlohmann_json::nlohmann_json)
target_compile_options(fuzz_spiece_model PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_spiece_model PRIVATE -fsanitize=fuzzer)
# clip_vocab.cpp's .incbin path is a source property of src/tokenizer, not seen from here.
target_compile_definitions(fuzz_spiece_model PRIVATE
  KVAD_CLIP_VOCAB_GZ="${PROJECT_SOURCE_DIR}/src/tokenizer/data/bpe_simple_vocab_16e6.txt.gz")
