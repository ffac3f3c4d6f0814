# fuzz_embeddings_request: libFuzzer target for the /v1/embeddings request
# parser (src/server/embeddings.h). Included from fuzz/CMakeLists.txt (after
# its clang check); embeddings.cpp and openai.cpp are compiled into the
# target for coverage. Seed corpus: tests/fixtures/server/embeddings_requests.
find_package(nlohmann_json CONFIG REQUIRED)
add_executable(fuzz_embeddings_request ${CMAKE_CURRENT_LIST_DIR}/fuzz_embeddings_request.cpp
  ${PROJECT_SOURCE_DIR}/src/server/embeddings.cpp ${PROJECT_SOURCE_DIR}/src/server/openai.cpp)
target_include_directories(fuzz_embeddings_request PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_embeddings_request PRIVATE kvad_engine kvad_base nlohmann_json::nlohmann_json)
target_compile_options(fuzz_embeddings_request PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_embeddings_request PRIVATE -fsanitize=fuzzer)
