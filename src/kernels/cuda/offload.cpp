// Eager offload slots (offload.h). Status: compiles; UNVERIFIED ON A GPU.
#include "kernels/cuda/offload.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "base/error.h"

namespace kvad::cuda {

struct Offload::Slot {
  DeviceBuffer x_dev, y_dev;
  PinnedBuffer x_host, y_host;
  EventHandle uploaded, computed, downloaded;
  bool busy = false;
  float* y = nullptr;  // caller's output
  size_t y_bytes = 0;
};

Offload::Offload(int n_slots) {
  if (n_slots < 1) throw Error("cuda::Offload: n_slots must be >= 1, is " + std::to_string(n_slots));
  Context::get();
  for (int i = 0; i < n_slots; ++i) slots_.push_back(std::make_unique<Slot>());
}

Offload::~Offload() {
  for (auto& s : slots_)
    if (s->busy) cudaEventSynchronize(s->downloaded.get());
}

int Offload::busy_slots() const {
  int n = 0;
  for (const auto& s : slots_) n += s->busy;
  return n;
}

std::optional<Offload::Ticket> Offload::try_matmul(const Tensor& w, const float* x, int64_t n_tok, float* y) {
  if (!has_kernels(w.type) || w.ne[0] % 32 != 0) return std::nullopt;
  int free = -1;
  for (size_t i = 0; i < slots_.size() && free < 0; ++i)
    if (!slots_[i]->busy) free = static_cast<int>(i);
  if (free < 0) return std::nullopt;

  Context& c = Context::get();
  auto it = weights_.find(w.data);
  if (it == weights_.end()) {
    Resident r;
    r.buf.reserve(w.n_bytes(), "offloaded weight");
    copy_to_device(r.buf.get(), w.data, w.n_bytes(), "upload of an offloaded weight");
    r.m = DeviceMatrix{w.type, w.ne[0], w.n_rows(), r.buf.get()};
    it = weights_.emplace(w.data, std::move(r)).first;
  }
  const DeviceMatrix& m = it->second.m;

  Slot& s = *slots_[free];
  const size_t xb = static_cast<size_t>(n_tok) * m.n_in * sizeof(float);
  const size_t yb = static_cast<size_t>(n_tok) * m.n_out * sizeof(float);
  s.x_host.reserve(xb);
  s.y_host.reserve(yb);
  s.x_dev.reserve(xb, "offload slot input");
  s.y_dev.reserve(yb, "offload slot output");
  std::memcpy(s.x_host.get(), x, xb);  // the reader fence: x is free once this returns

  c.note_op("offload matmul (upload)");
  check_status(cudaMemcpyAsync(s.x_dev.get(), s.x_host.get(), xb, cudaMemcpyHostToDevice, c.upload()),
               "offload matmul: upload");
  s.uploaded.record(c.upload());
  s.uploaded.wait_on(c.compute());
  matmul(m, s.x_dev.as<float>(), n_tok, s.y_dev.as<float>());
  s.computed.record(c.compute());
  s.computed.wait_on(c.download());
  c.note_op("offload matmul (download)");
  check_status(cudaMemcpyAsync(s.y_host.get(), s.y_dev.get(), yb, cudaMemcpyDeviceToHost, c.download()),
               "offload matmul: download");
  s.downloaded.record(c.download());
  s.busy = true;
  s.y = y;
  s.y_bytes = yb;
  return Ticket(this, free);
}

void Offload::finish(int slot) {
  Slot& s = *slots_[slot];
  if (!s.busy) return;
  s.busy = false;  // freed even when the wait throws: the fault is sticky, later calls report it too
  s.downloaded.synchronize("offload matmul");
  std::memcpy(s.y, s.y_host.get(), s.y_bytes);
}

Offload::Ticket::~Ticket() {
  if (!owner_) return;
  try {
    owner_->finish(slot_);
  } catch (...) {
  }
}

bool Offload::Ticket::ready() const { return !owner_ || owner_->slots_[slot_]->downloaded.done(); }

void Offload::Ticket::wait() {
  if (!owner_) return;
  Offload* o = owner_;
  owner_ = nullptr;
  o->finish(slot_);
}

}  // namespace kvad::cuda
