// cuBLAS loaded on first use, not at program start.
//
// Linking libcublas (and with it libcublasLt) into kvad costs about 150 MiB
// of resident memory in every process, GPU or not (measured: a program
// linked against them starts at 155 MiB RSS, against cudart alone 1.5 MiB),
// which a CPU session must not pay. So kvad does not link cuBLAS: this file
// defines the seven cuBLAS entry points the backend calls, and each forwards
// to the real one, looked up with dlopen/dlsym the first time any is called
// (by cuda::Context's constructor, i.e. only when a GPU is used).
// libcublas.so.13 is searched by the dynamic loader's rules (RUNPATH,
// LD_LIBRARY_PATH, ld.so.cache), then beside the libcudart in use.
// When it cannot be loaded every call returns CUBLAS_STATUS_NOT_INITIALIZED
// and cublasGetStatusString says why.
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>

namespace {

std::string g_error;

void* cublas_library() {
  static void* handle = [] {
    const char* names[] = {"libcublas.so.13", "libcublas.so"};
    for (const char* n : names)
      if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
    g_error = dlerror();
    // Beside the CUDA runtime this process uses.
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) && info.dli_fname) {
      std::string dir = info.dli_fname;
      dir = dir.substr(0, dir.find_last_of('/') + 1);
      if (void* h = dlopen((dir + "libcublas.so.13").c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    }
    g_error = "cannot load cuBLAS (libcublas.so.13): " + g_error;
    return static_cast<void*>(nullptr);
  }();
  return handle;
}

template <typename F>
F lookup(const char* name) {
  void* h = cublas_library();
  return h ? reinterpret_cast<F>(dlsym(h, name)) : nullptr;
}

}  // namespace

#define KVAD_FORWARD_T(type, name, ...)          \
  static const auto f = lookup<type>(#name);             \
  if (!f) return CUBLAS_STATUS_NOT_INITIALIZED;          \
  return f(__VA_ARGS__)
#define KVAD_FORWARD(name, ...) KVAD_FORWARD_T(decltype(&name), name, __VA_ARGS__)

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) { KVAD_FORWARD(cublasCreate_v2, handle); }

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) { KVAD_FORWARD(cublasDestroy_v2, handle); }

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  KVAD_FORWARD(cublasSetStream_v2, handle, stream);
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  KVAD_FORWARD(cublasSetWorkspace_v2, handle, workspace, bytes);
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  KVAD_FORWARD(cublasSetMathMode, handle, mode);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  using Fn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  KVAD_FORWARD_T(Fn, cublasGemmEx, handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype,
               ldc, computeType, algo);
}

const char* cublasGetStatusString(cublasStatus_t status) {
  static const auto f = lookup<decltype(&cublasGetStatusString)>("cublasGetStatusString");
  if (!f) return g_error.empty() ? "cuBLAS entry point missing" : g_error.c_str();
  return f(status);
}

}  // extern "C"
