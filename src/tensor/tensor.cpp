#include "tensor/tensor.h"

#include <cctype>

#include "base/error.h"

namespace kvad {

std::string Device::str() const {
  switch (type) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::Sim: return "sim";
    case DeviceType::CUDA: return index == 0 ? "cuda" : "cuda:" + std::to_string(index);
  }
  return "?";
}

Device Device::parse(std::string_view s) {
  if (s == "cpu") return cpu();
  if (s == "sim") return sim();
  if (s == "cuda") return cuda(0);
  if (s.substr(0, 5) == "cuda:" && s.size() > 5 && s.size() < 9) {
    int i = 0;
    for (char c : s.substr(5)) {
      if (!std::isdigit(static_cast<unsigned char>(c))) i = -1;
      if (i >= 0) i = i * 10 + (c - '0');
    }
    if (i >= 0) return cuda(i);
  }
  throw Error("unknown device '" + std::string(s) + "' (devices: cpu, cuda, cuda:N, sim)");
}

Storage::~Storage() {
  if (release_) release_(p_, n_);
}

void Storage::set_pending(std::shared_ptr<Completion> c) {
  std::lock_guard<std::mutex> lk(mu_);
  pending_ = std::move(c);
}

void Storage::wait() const {
  std::shared_ptr<Completion> c;
  {
    std::lock_guard<std::mutex> lk(mu_);
    c = std::move(pending_);
    pending_.reset();
  }
  if (c) c->wait();
}

std::array<size_t, 4> contiguous_strides(DType t, const std::array<int64_t, 4>& ne) {
  std::array<size_t, 4> nb;
  nb[0] = dtype_info(t).block_bytes;
  nb[1] = row_bytes(t, ne[0]);
  nb[2] = nb[1] * static_cast<size_t>(ne[1]);
  nb[3] = nb[2] * static_cast<size_t>(ne[2]);
  return nb;
}

bool Tensor::is_contiguous() const {
  const std::array<size_t, 4> c = contiguous_strides(type, ne);
  for (int i = 0; i < 4; ++i)
    if (ne[i] != 1 && nb[i] != c[i]) return false;
  return true;
}

void Tensor::set_contiguous_strides() { nb = contiguous_strides(type, ne); }

std::string shape_str(const Tensor& t) {
  int n = 4;
  while (n > 1 && t.ne[n - 1] == 1) --n;
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
  s += "]";
  if (t.is_contiguous()) return s;
  s += " nb [";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(t.nb[i]);
  return s + "]";
}

Tensor Tensor::rows(int64_t r0, int64_t r1) const {
  if (r0 < 0 || r1 < r0 || r1 > n_rows())
    throw Error("tensor " + name + " " + shape_str(*this) + ": rows [" + std::to_string(r0) + ", " +
                std::to_string(r1) + ") out of range");
  // The row stride: dims 1..3 must merge into one evenly spaced run.
  size_t rs = row_size();
  if (!is_contiguous()) {
    rs = ne[1] > 1 ? nb[1] : ne[2] > 1 ? nb[2] : nb[3];
    size_t next = rs;
    for (int i = 1; i < 4; ++i) {
      if (ne[i] == 1) continue;
      if (nb[i] != next)
        throw Error("tensor " + name + " " + shape_str(*this) + ": its rows are not evenly spaced (ops::cont first)");
      next = nb[i] * static_cast<size_t>(ne[i]);
    }
  }
  Tensor v = *this;
  v.ne = {ne[0], r1 - r0, 1, 1};
  v.nb = {nb[0], rs, rs * static_cast<size_t>(r1 - r0), rs * static_cast<size_t>(r1 - r0)};
  const size_t off = static_cast<size_t>(r0) * rs;
  v.offset = offset + off;
  if (data) v.data = static_cast<const uint8_t*>(data) + off;
  return v;
}

Tensor Tensor::view(std::array<int64_t, 4> shape) const {
  const int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
  const int64_t be = dtype_info(type).block_elems;
  if (!is_contiguous())
    throw Error("tensor " + name + " " + shape_str(*this) + ": a strided tensor cannot be reshaped (ops::cont first)");
  if (n != n_elements() || shape[0] <= 0 || shape[0] % be != 0)
    throw Error("tensor " + name + " " + shape_str(*this) + ": cannot be viewed as [" + std::to_string(shape[0]) +
                ", " + std::to_string(shape[1]) + ", " + std::to_string(shape[2]) + ", " +
                std::to_string(shape[3]) + "]");
  Tensor v = *this;
  v.ne = shape;
  v.set_contiguous_strides();
  return v;
}

}  // namespace kvad
