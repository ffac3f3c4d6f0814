// Eager offload of a CPU session's large matmuls to the GPU (DESIGN.md
// seam 3). cpu::matmul offers each op to a hook
// (cpu::set_matmul_offload); this one sends it to a process-wide Offload
// (offload.h, 4 slots) when the work gate admits it, and waits for the
// result before returning (the CPU model reads y at once). With every slot
// busy, or another thread holding the offloader, the op stays on the CPU.
//
// The gate, by m·n·k (m = tokens, n = output rows, k = input elements), by
// format, and by whether the weight is already resident on the device:
//   KVAD_GPU_OFFLOAD=1             turns offload on (kvad run/chat/bench/serve with --device cpu)
//   KVAD_GPU_MIN_WORK=N            m·n·k at least N for a weight not yet resident
//                                  (its upload is paid once); default 2^30
//   KVAD_GPU_MIN_WORK_RESIDENT=N   m·n·k at least N for a resident weight; default 2^27
//   KVAD_GPU_FORMATS=a,b           ggml names of the formats offloaded (default: every
//                                  format with CUDA kernels: f32,f16,bf16,q8_0,q4_0,q4_K,q6_K)
//   KVAD_GPU_MAX_RESIDENT_MB=N     stop uploading new weights past N MiB; default 65536
// The defaults are placeholders chosen from the arithmetic (an upload costs
// about as much as a decode step reading the weight on the CPU), NOT measured
// on the H200: no GPU was available in this build. UNVERIFIED ON A GPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace kvad::cuda {

struct OffloadGate {
  int64_t min_work = int64_t{1} << 30;
  int64_t min_work_resident = int64_t{1} << 27;
  std::vector<DType> formats;  ///< empty: every format with CUDA kernels
  size_t max_resident_bytes = size_t{65536} << 20;

  /// The defaults overridden by the KVAD_GPU_* variables above. Throws
  /// kvad::Error naming the variable for a value that does not parse.
  static OffloadGate from_env();
  /// True when the op should go to the GPU.
  bool admits(const Tensor& w, int64_t n_tok, bool resident, size_t resident_bytes) const;
};

/// True when KVAD_GPU_OFFLOAD is set to 1.
bool offload_requested();

/// Installs the hook with `gate`. Returns false, with the reason in `why`,
/// when there is no CUDA device (the CPU then keeps every op).
bool install_cpu_offload(const OffloadGate& gate, std::string* why = nullptr);

/// Ops sent to the GPU and ops the gate admitted but the CPU ran (slots busy), so far.
struct OffloadStats {
  int64_t offloaded = 0, fell_back = 0;
};
OffloadStats offload_stats();

}  // namespace kvad::cuda
