// The CPU's and the sim device's rows of the op table (tensor/backend.h):
// their memory (the host allocator below) and the table of entries.
//
// Both rows run the same entries on host memory: format_ops.cpp (matmul,
// get_rows, convert), elementwise.cpp, row_ops.cpp (norms, rope, softmax,
// concat, slice), strided.cpp (cont; the strided binary and concat) and
// matmul_batched.cpp, attention.cpp (kv_store, attention), mla.cpp, moe.cpp and
// recurrent.cpp, over the kernels of host_kernels.h and the format table
// (kernels.h). They differ only in memory: a CPU tensor's bytes are host
// memory anyone may read (Tensor::data is set), a sim tensor's are reached
// only through these entries (Tensor::data is null, and tensor/ops.cpp counts
// every host transfer), which lets tests prove on any machine that a model
// resident on a device does no host round trip between layers (DESIGN.md
// seam 3).
//
// Work is split over the pool ops::current_pool() names (Session sets it for
// a forward call); without one, the calling thread does it all (row_util.h).
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/format_ops.h"
#include "kernels/cpu/image_ops.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/mla.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/recurrent.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/cpu/strided.h"
#include "tensor/backend.h"

namespace kvad::cpu {
namespace {

// ---- memory --------------------------------------------------------------

constexpr size_t kAlign = 64;
constexpr size_t kMaxCachedBlock = 64u << 20;   // larger blocks go straight back to the system
constexpr size_t kMaxCachedTotal = 256u << 20;  // bound on the bytes kept for reuse

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

void* system_alloc(size_t n) {
  void* p = std::aligned_alloc(kAlign, round_up(n));
  if (!p) throw Error("out of host memory allocating " + std::to_string(n) + " bytes");
  return p;
}

// Activations of one forward call have the same few sizes layer after layer:
// freed blocks are kept by exact size and handed out again, last freed
// first, so an op's output is usually a block that is still in cache and
// costs neither a system call nor fresh page faults (with blocks handed out
// in any order, a decode step cycled through ~1 MB of distinct buffers and
// evicted the KV rows attention reads: -6% decode at 512 positions).
// Bounded: at most kMaxCachedTotal bytes wait for reuse.
class BlockCache {
 public:
  void* alloc(size_t n) {
    n = round_up(n);
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = free_.find(n);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= n;
        return p;
      }
    }
    return system_alloc(n);
  }
  void release(void* p, size_t n) {
    n = round_up(n);
    if (n <= kMaxCachedBlock) {
      std::lock_guard<std::mutex> lk(mu_);
      if (cached_ + n <= kMaxCachedTotal) {
        free_[n].push_back(p);
        cached_ += n;
        return;
      }
    }
    std::free(p);
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // by size, a stack each
  size_t cached_ = 0;
};

BlockCache& blocks() {
  static BlockCache* c = new BlockCache();  // never destroyed: storages may outlive static destruction order
  return *c;
}

void* cpu_alloc(size_t n) { return blocks().alloc(n); }
void cpu_release(void* p, size_t n) { blocks().release(p, n); }
void* sim_alloc(size_t n) { return system_alloc(n); }
void sim_release(void* p, size_t) { std::free(p); }
void host_copy(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }
bool always(std::string*) { return true; }

constexpr BackendOps kCpuRow = {
    .name = "cpu",
    .available = &always,
    .has_format = &has_cpu_kernels,
    .alloc = &cpu_alloc,
    .release = &cpu_release,
    .write = &host_copy,
    .read = &host_copy,
    .copy = &host_copy,
    .convert = &convert,
    .cont = &cont,
    .matmul = &matmul,
    .matmul_batched = &matmul_batched,
    .binary = &binary,
    .scale = &scale,
    .rms_norm = &rms_norm,
    .layer_norm = &layer_norm,
    .rope = &rope,
    .get_rows = &get_rows,
    .softmax = &softmax,
    .unary = &unary,
    .glu = &glu,
    .concat = &concat,
    .slice = &slice,
    .swiglu_oai = &swiglu_oai,
    .kv_store = &kv_store,
    .attention = &attention,
    .attention_latent = &cpu::attention_latent,
    .attention_seq = &cpu::attention_seq,
    .group_norm = &cpu::group_norm,
    .upsample_nearest2d = &cpu::upsample_nearest2d,
    .pad = &cpu::pad,
    .concat_dim = &cpu::concat_dim,
    .conv2d = &cpu::conv2d,
    .sdpa = &cpu::sdpa,
    .moe_route = &cpu::moe_route,
    .matmul_id = &cpu::matmul_id,
    .moe_sum = &cpu::moe_sum,
    .ssm_conv = &cpu::ssm_conv,
    .gated_delta_rule = &cpu::gated_delta_rule,
};

// The sim row: the CPU's kernels on memory of its own.
constexpr BackendOps make_sim_row() {
  BackendOps r = kCpuRow;
  r.name = "sim";
  r.alloc = &sim_alloc;
  r.release = &sim_release;
  return r;
}
constexpr BackendOps kSimRow = make_sim_row();

const bool kRegistered = [] {
  register_backend(DeviceType::CPU, &kCpuRow);
  register_backend(DeviceType::Sim, &kSimRow);
  return true;
}();

}  // namespace
}  // namespace kvad::cpu

// Referenced with the linker's --undefined by every program that links
// kvad_kernels_cpu (CMakeLists.txt), so this file, and its registration,
// is always linked in from the static library.
extern "C" {
extern const int kvad_cpu_backend_anchor;
const int kvad_cpu_backend_anchor = kvad::cpu::kRegistered ? 1 : 0;
}
