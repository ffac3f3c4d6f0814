// Eager offload hook (cpu_offload.h). Status: compiles; UNVERIFIED ON A GPU.
#include "kernels/cuda/cpu_offload.h"

#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>

#include "base/error.h"
#include "kernels/cpu/host_kernels.h"
#include "kernels/cuda/offload.h"
#include "kernels/cuda/device_kernels.h"
#include "tensor/backend.h"

namespace kvad::cuda {

namespace {

struct State {
  OffloadGate gate;
  std::unique_ptr<Offload> off;
  std::mutex mu;
  size_t resident_bytes = 0;
  OffloadStats stats;
};
State* g_state = nullptr;

int64_t env_int(const char* name, int64_t def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 0);
  if (*end != '\0' || x < 0) throw Error(std::string(name) + "=" + v + " is not a non-negative integer");
  return x;
}

bool hook(const Tensor& w, const float* x, int64_t n_tok, float* y) {
  State& s = *g_state;
  std::unique_lock<std::mutex> lock(s.mu, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // another thread is offloading: stay on the CPU
  const bool res = s.off->resident(w);
  if (!s.gate.admits(w, n_tok, res, s.resident_bytes)) return false;
  auto t = s.off->try_matmul(w, x, n_tok, y);
  if (!t) {
    ++s.stats.fell_back;
    return false;
  }
  if (!res) s.resident_bytes += w.n_bytes();
  t->wait();  // the CPU model reads y next
  ++s.stats.offloaded;
  return true;
}

}  // namespace

OffloadGate OffloadGate::from_env() {
  OffloadGate g;
  g.min_work = env_int("KVAD_GPU_MIN_WORK", g.min_work);
  g.min_work_resident = env_int("KVAD_GPU_MIN_WORK_RESIDENT", g.min_work_resident);
  g.max_resident_bytes = static_cast<size_t>(env_int("KVAD_GPU_MAX_RESIDENT_MB", g.max_resident_bytes >> 20)) << 20;
  if (const char* f = std::getenv("KVAD_GPU_FORMATS"); f && *f) {
    std::stringstream ss(f);
    std::string name;
    while (std::getline(ss, name, ',')) {
      const DTypeInfo* i = find_dtype_by_name(name);
      if (!i || !has_kernels(i->type))
        throw Error("KVAD_GPU_FORMATS: '" + name + "' is not a format with CUDA kernels (f32, f16, bf16, q8_0, "
                    "q4_0, q4_K, q6_K)");
      g.formats.push_back(i->type);
    }
  }
  return g;
}

bool OffloadGate::admits(const Tensor& w, int64_t n_tok, bool resident, size_t resident_bytes) const {
  if (!has_kernels(w.type) || w.ne[0] % 32 != 0) return false;
  if (!formats.empty()) {
    bool ok = false;
    for (DType t : formats) ok = ok || t == w.type;
    if (!ok) return false;
  }
  if (!resident && resident_bytes + w.n_bytes() > max_resident_bytes) return false;
  const double work = static_cast<double>(n_tok) * static_cast<double>(w.n_rows()) * static_cast<double>(w.ne[0]);
  return work >= static_cast<double>(resident ? min_work_resident : min_work);
}

bool offload_requested() {
  const char* v = std::getenv("KVAD_GPU_OFFLOAD");
  return v && std::string(v) == "1";
}

bool install_cpu_offload(const OffloadGate& gate, std::string* why) {
  if (!available(why)) return false;
  if (!g_state) g_state = new State();  // process lifetime: the hook may run until exit
  g_state->gate = gate;
  if (!g_state->off) g_state->off = std::make_unique<Offload>(4);
  set_matmul_offload(&hook);
  return true;
}

OffloadStats offload_stats() { return g_state ? g_state->stats : OffloadStats{}; }

}  // namespace kvad::cuda
