# fuzz_gbnf and fuzz_json_schema: libFuzzer targets for the grammar parser
# and the JSON Schema compiler (src/engine/grammar/grammar.h, json_schema.h).
# Included from fuzz/CMakeLists.txt (after its clang check); the grammar
# sources are compiled into each target for coverage. Seed corpus:
# tests/fixtures/grammar/broken (and tests/fixtures/json_schema_suite for
# schemas, one group's "schema" per file after extraction).
find_package(nlohmann_json CONFIG REQUIRED)
set(KVAD_GRAMMAR_SOURCES
  ${PROJECT_SOURCE_DIR}/src/engine/grammar/gbnf.cpp
  ${PROJECT_SOURCE_DIR}/src/engine/grammar/grammar_matcher.cpp
  ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema.cpp ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_merge.cpp
  ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_text.cpp ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_uri.cpp ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_keys.cpp ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_numbers.cpp
  ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_logic.cpp
  ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_struct.cpp
  ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_compound.cpp)
foreach(t fuzz_gbnf fuzz_json_schema)
  add_executable(${t} ${CMAKE_CURRENT_LIST_DIR}/${t}.cpp ${KVAD_GRAMMAR_SOURCES})
  target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${t} PRIVATE kvad_base nlohmann_json::nlohmann_json)
  target_compile_options(${t} PRIVATE -fsanitize=fuzzer)
  target_link_options(${t} PRIVATE -fsanitize=fuzzer)
endforeach()
