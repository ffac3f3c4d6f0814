# fuzz_model_hparams: libFuzzer target for the architecture loaders and their
# first forward pass under edited hyper-parameters (see the .cpp). Included
# from fuzz/CMakeLists.txt (after its clang check). Only this file gets
# coverage instrumentation; the model code is reached through kvad_engine.
# Seed corpus: tests/fixtures/model_hparams (one file per architecture,
# made by tools/make_model_hparams_seeds.py).
add_executable(fuzz_model_hparams ${CMAKE_CURRENT_LIST_DIR}/fuzz_model_hparams.cpp)
target_include_directories(fuzz_model_hparams PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_model_hparams PRIVATE kvad_engine kvad_model kvad_io)
target_compile_definitions(fuzz_model_hparams PRIVATE KVAD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
target_compile_options(fuzz_model_hparams PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_model_hparams PRIVATE -fsanitize=fuzzer)
