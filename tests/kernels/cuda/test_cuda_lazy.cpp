// cuBLAS is loaded on first use (kernels/cuda/cublas_lazy.cpp), so a CPU
// session that never touches the GPU does not map it (~150 MiB of RSS).
// Runs without a GPU: cublasGetStatusString needs no device.
#include <gtest/gtest.h>

#include <cublas_api.h>
#include <dlfcn.h>

#include <fstream>
#include <string>

namespace {

bool cublas_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libcublas.so") != std::string::npos) return true;
  return false;
}

TEST(CublasLazy, NotMappedUntilFirstCallThenForwards) {
  EXPECT_FALSE(cublas_mapped()) << "libcublas is mapped before any cuBLAS call";
  if (void* h = dlopen("libcublas.so.13", RTLD_LAZY | RTLD_NOLOAD)) {
    dlclose(h);
    FAIL() << "libcublas.so.13 is already loaded";
  }
  const std::string s = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
  if (!cublas_mapped()) GTEST_SKIP() << "cuBLAS cannot be loaded on this machine: " << s;
  // The real library's text for the status (cuBLAS 13; the shim's own messages differ).
  EXPECT_EQ(s, "success");
  EXPECT_STREQ(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED), "the requested functionality is not supported");
}

}  // namespace
