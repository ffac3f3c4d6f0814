# fuzz_image_lora: libFuzzer target for image LoRA files (model/image/lora.h:
# the key-spelling parser, the shape checks and the deltas; see the .cpp).
# Included from fuzz/CMakeLists.txt (after its clang check). Seed corpus:
# tests/fixtures/image_lora_seeds (made by tools/make_image_lora_fixtures.py).
add_executable(fuzz_image_lora ${CMAKE_CURRENT_LIST_DIR}/fuzz_image_lora.cpp)
target_include_directories(fuzz_image_lora PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_image_lora PRIVATE kvad_model)
target_compile_definitions(fuzz_image_lora PRIVATE KVAD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
target_compile_options(fuzz_image_lora PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_image_lora PRIVATE -fsanitize=fuzzer)
