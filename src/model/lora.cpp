// The side path of model/lora.h. Loading (PEFT folders, llama.cpp GGUF
// adapters) is lora_load.cpp.
#include "model/lora.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "base/error.h"
#include "tensor/ops.h"

namespace kvad {

const LoraPair* LoraAdapter::find(std::string_view name) const {
  auto it = pairs.find(name);
  return it == pairs.end() ? nullptr : &it->second;
}

std::shared_ptr<const LoraBatch> LoraBatch::make(const LoraSet* all, const LoraSet* const* rows, int64_t n,
                                                 Device d) {
  if (!rows) {
    if (!all || all->empty()) return nullptr;
    auto lb = std::make_shared<LoraBatch>();
    for (const LoraUse& u : all->uses) {
      auto it = std::find_if(lb->uses.begin(), lb->uses.end(), [&](const Use& v) { return v.adapter == u.adapter.get(); });
      if (it == lb->uses.end()) lb->uses.push_back({u.adapter.get(), u.strength, {}});
      else it->strength += u.strength;
    }
    std::erase_if(lb->uses, [](const Use& v) { return v.strength == 0.0f; });  // exactly the base, as peft's scale 0
    return lb->uses.empty() ? nullptr : lb;
  }
  // Each adapter's strength per row, then one upload per adapter that rows differ on.
  std::vector<const LoraAdapter*> adapters;
  std::vector<std::vector<float>> w;
  for (int64_t i = 0; i < n; ++i) {
    if (!rows[i]) continue;
    for (const LoraUse& u : rows[i]->uses) {
      size_t k = std::find(adapters.begin(), adapters.end(), u.adapter.get()) - adapters.begin();
      if (k == adapters.size()) adapters.push_back(u.adapter.get()), w.emplace_back(n, 0.0f);
      w[k][i] += u.strength;
    }
  }
  auto lb = std::make_shared<LoraBatch>();
  for (size_t k = 0; k < adapters.size(); ++k) {
    const std::vector<float>& v = w[k];
    if (std::all_of(v.begin(), v.end(), [](float s) { return s == 0.0f; })) continue;
    if (std::all_of(v.begin(), v.end(), [&](float s) { return s == v[0]; })) {
      lb->uses.push_back({adapters[k], v[0], {}});
      continue;
    }
    lb->uses.push_back({adapters[k], 0.0f, ops::from_host(v.data(), DType::F32, {1, n, 1, 1}, d)});
  }
  return lb->uses.empty() ? nullptr : lb;
}

Tensor lora_add(const LoraBatch* lb, const Tensor& w, const Tensor& x, const Tensor& y) {
  if (!lb) return y;
  Tensor out = y;
  for (const LoraBatch::Use& u : lb->uses) {
    const LoraPair* p = u.adapter->find(w.name);
    if (!p) continue;
    if (p->a.ne[0] != x.ne[0] || p->b.ne[1] != y.ne[0])
      throw Error("LoRA " + u.adapter->path + ": pair of " + w.name + " is [" + std::to_string(p->a.ne[0]) + " → " +
                  std::to_string(p->b.ne[1]) + "], the product is [" + std::to_string(x.ne[0]) + " → " +
                  std::to_string(y.ne[0]) + "]");
    // The scales go on the rank-wide middle product: r values per token.
    const Tensor xa = ops::matmul(x, p->a);                                          // [n_tok, r]
    const Tensor s = u.rows ? ops::scale(ops::mul(xa, u.rows), p->scale) : ops::scale(xa, u.strength * p->scale);
    out = ops::add(out, ops::matmul(s, p->b));                                       // [n_tok, n_out]
  }
  return out;
}

Tensor linear(const LoraBatch* lb, const Tensor& x, const Tensor& w, const Tensor* bias) {
  return lora_add(lb, w, x, ops::matmul(x, w, bias));
}

std::vector<Tensor> linear_multi(const LoraBatch* lb, const Tensor& x, std::initializer_list<const Tensor*> ws) {
  std::vector<Tensor> ys = ops::matmul_multi(x, ws);
  if (!lb) return ys;
  size_t i = 0;
  for (const Tensor* w : ws) ys[i] = lora_add(lb, *w, x, ys[i]), ++i;
  return ys;
}

std::pair<std::string, float> parse_lora_arg(const std::string& arg) {
  const size_t at = arg.rfind('@');
  if (at == std::string::npos || at == 0) return {arg, 1.0f};
  const std::string num = arg.substr(at + 1);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(num.c_str(), &end);
  if (num.empty() || end != num.c_str() + num.size() || errno == ERANGE || !std::isfinite(v))
    throw Error("--lora " + arg + ": strength '" + num + "' is not a finite number");
  return {arg.substr(0, at), static_cast<float>(v)};
}

}  // namespace kvad
