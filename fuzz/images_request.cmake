# fuzz_images_request: libFuzzer target for the image APIs' request parsers
# (src/server/images_api.h: OpenAI's /v1/images/generations and A1111's
# /sdapi/v1/txt2img). Included from fuzz/CMakeLists.txt (after its clang
# check); the parsers' sources are compiled into the target for coverage.
# Seed corpus: tests/fixtures/server/images_requests (first byte 'o': OpenAI,
# else A1111).
find_package(nlohmann_json CONFIG REQUIRED)
add_executable(fuzz_images_request ${CMAKE_CURRENT_LIST_DIR}/fuzz_images_request.cpp
  ${PROJECT_SOURCE_DIR}/src/server/images_api.cpp ${PROJECT_SOURCE_DIR}/src/server/embeddings.cpp
  ${PROJECT_SOURCE_DIR}/src/server/openai.cpp ${PROJECT_SOURCE_DIR}/src/server/json_parse.cpp)
target_include_directories(fuzz_images_request PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_images_request PRIVATE kvad_engine kvad_io kvad_base nlohmann_json::nlohmann_json)
target_compile_options(fuzz_images_request PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_images_request PRIVATE -fsanitize=fuzzer)
