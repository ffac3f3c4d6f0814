# fuzz_openai_request: libFuzzer target for the request parsers of
# /v1/chat/completions, /v1/completions (src/server/openai.h), /v1/messages
# (anthropic.h), /v1/responses (responses.h), ollama's /api/chat and
# /api/generate (ollama_api.h) and llama.cpp's /completion and /infill
# (llamacpp_api.h). Included from fuzz/CMakeLists.txt (after its clang
# check); openai.cpp is compiled into the target for coverage. Seed corpus:
# tests/fixtures/server/requests.
find_package(nlohmann_json CONFIG REQUIRED)
add_executable(fuzz_openai_request ${CMAKE_CURRENT_LIST_DIR}/fuzz_openai_request.cpp
  ${PROJECT_SOURCE_DIR}/src/server/openai.cpp ${PROJECT_SOURCE_DIR}/src/server/anthropic.cpp
  ${PROJECT_SOURCE_DIR}/src/server/responses.cpp ${PROJECT_SOURCE_DIR}/src/server/chat_output.cpp
  ${PROJECT_SOURCE_DIR}/src/server/tool_calls.cpp ${PROJECT_SOURCE_DIR}/src/server/json_parse.cpp
  ${PROJECT_SOURCE_DIR}/src/server/ollama_api.cpp ${PROJECT_SOURCE_DIR}/src/server/llamacpp_api.cpp
  # response_format / grammar compile here (400 on a refused schema)
  ${PROJECT_SOURCE_DIR}/src/engine/grammar/gbnf.cpp ${PROJECT_SOURCE_DIR}/src/engine/grammar/grammar_matcher.cpp
  ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema.cpp ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_merge.cpp ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_text.cpp
  ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_logic.cpp ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_struct.cpp
  ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_compound.cpp ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_uri.cpp ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_keys.cpp ${PROJECT_SOURCE_DIR}/src/engine/grammar/json_schema_numbers.cpp)
target_include_directories(fuzz_openai_request PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_openai_request PRIVATE kvad_base nlohmann_json::nlohmann_json)
target_compile_options(fuzz_openai_request PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_openai_request PRIVATE -fsanitize=fuzzer)
