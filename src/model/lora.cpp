// The side path of model/lora.h. Loading (PEFT folders, llama.cpp GGUF
// adapters) is lora_load.cpp.
#include "model/lora.h"

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

Tensor lora_add(const LoraSet* set, const Tensor& w, const Tensor& x, const Tensor& y) {
  if (!set || set->empty()) return y;
  Tensor out = y;
  for (const LoraUse& u : set->uses) {
    if (u.strength == 0.0f) continue;  // exactly the base, as peft's scale 0
    const LoraPair* p = u.adapter->find(w.name);
    if (!p) continue;
    if (p->a.ne[0] != x.ne[0] || p->b.ne[1] != y.ne[0])
      throw Error("LoRA " + u.adapter->path + ": pair of " + w.name + " is [" + std::to_string(p->a.ne[0]) + " → " +
                  std::to_string(p->b.ne[1]) + "], the product is [" + std::to_string(x.ne[0]) + " → " +
                  std::to_string(y.ne[0]) + "]");
    // The scale goes on the rank-wide middle product: r values per token.
    const Tensor xa = ops::scale(ops::matmul(x, p->a), u.strength * p->scale);  // [n_tok, r]
    out = ops::add(out, ops::matmul(xa, p->b));                                 // [n_tok, n_out]
  }
  return out;
}

Tensor linear(const LoraSet* set, const Tensor& x, const Tensor& w, const Tensor* bias) {
  return lora_add(set, w, x, ops::matmul(x, w, bias));
}

std::vector<Tensor> linear_multi(const LoraSet* set, const Tensor& x, std::initializer_list<const Tensor*> ws) {
  std::vector<Tensor> ys = ops::matmul_multi(x, ws);
  if (!set || set->empty()) return ys;
  size_t i = 0;
  for (const Tensor* w : ws) ys[i] = lora_add(set, *w, x, ys[i]), ++i;
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
