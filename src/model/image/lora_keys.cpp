// Reading image LoRA files (model/image/lora.h): each key's spelling to the
// pipeline weight it changes and its part, then the parts of one weight into
// a LoraModule, with every shape checked against the base weight.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "base/error.h"
#include "io/safetensors.h"
#include "io/tensor_source.h"
#include "model/image/ldm_names.h"
#include "model/image/lora.h"
#include "tensor/half.h"

namespace kvad::image {

namespace {

using std::string;
using json = nlohmann::json;

string underscored(string s) {
  std::replace(s.begin(), s.end(), '.', '_');
  return s;
}

string dims(const std::vector<int64_t>& d) {
  string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

int64_t numel(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

// The parts a key may end in, and what they are.
enum class Part { Down, Up, Alpha, W1a, W1b, W2a, W2b, Kw1, Kw1a, Kw1b, Kw2, Kw2a, Kw2b, Diff, Unsupported };

struct Suffix {
  const char* text;
  Part part;
  const char* why = nullptr;  // Unsupported: what it is
};

const Suffix kSuffixes[] = {
    {".lora_down.weight", Part::Down},
    {".lora_up.weight", Part::Up},
    {".lora_A.weight", Part::Down},
    {".lora_B.weight", Part::Up},
    {".lora_linear_layer.down.weight", Part::Down},
    {".lora_linear_layer.up.weight", Part::Up},
    {".lora.down.weight", Part::Down},
    {".lora.up.weight", Part::Up},
    {"_lora.down.weight", Part::Down},  // attn processor: to_q_lora.down.weight
    {"_lora.up.weight", Part::Up},
    {".alpha", Part::Alpha},
    {".hada_w1_a", Part::W1a},
    {".hada_w1_b", Part::W1b},
    {".hada_w2_a", Part::W2a},
    {".hada_w2_b", Part::W2b},
    {".lokr_w1", Part::Kw1},
    {".lokr_w1_a", Part::Kw1a},
    {".lokr_w1_b", Part::Kw1b},
    {".lokr_w2", Part::Kw2},
    {".lokr_w2_a", Part::Kw2a},
    {".lokr_w2_b", Part::Kw2b},
    {".diff", Part::Diff},
    {".lora_mid.weight", Part::Unsupported, "a Tucker-decomposed LoCon (lora_mid)"},
    {".hada_t1", Part::Unsupported, "a Tucker-decomposed LoHa (hada_t1)"},
    {".hada_t2", Part::Unsupported, "a Tucker-decomposed LoHa (hada_t2)"},
    {".lokr_t2", Part::Unsupported, "a Tucker-decomposed LoKr (lokr_t2)"},
    {".dora_scale", Part::Unsupported, "DoRA (dora_scale)"},
    {".lora_magnitude_vector", Part::Unsupported, "DoRA (lora_magnitude_vector)"},
    {".lora_magnitude_vector.weight", Part::Unsupported, "DoRA (lora_magnitude_vector)"},
    {".diff_b", Part::Unsupported, "a bias delta (diff_b)"},
};

const char* part_name(Part p) {
  switch (p) {
    case Part::Down: return "lora_down";
    case Part::Up: return "lora_up";
    case Part::Alpha: return "alpha";
    case Part::W1a: return "hada_w1_a";
    case Part::W1b: return "hada_w1_b";
    case Part::W2a: return "hada_w2_a";
    case Part::W2b: return "hada_w2_b";
    case Part::Kw1: return "lokr_w1";
    case Part::Kw1a: return "lokr_w1_a";
    case Part::Kw1b: return "lokr_w1_b";
    case Part::Kw2: return "lokr_w2";
    case Part::Kw2a: return "lokr_w2_a";
    case Part::Kw2b: return "lokr_w2_b";
    case Part::Diff: return "diff";
    default: return "?";
  }
}

struct Group {
  std::map<Part, const safetensors::TensorInfo*> parts;
  bool peft = false;  // alpha from the adapter metadata
  string module;      // the file's name for the module (a key without its part)
};

// A key's values as f32; non-finite values refused.
LoraFactor read(const safetensors::TensorInfo& t, const string& file) {
  LoraFactor f;
  f.shape = t.shape;
  const size_t n = static_cast<size_t>(t.n_elements);
  f.v.resize(n);
  const uint8_t* p = t.data;
  switch (t.dtype) {
    case safetensors::Dtype::F32:
      std::memcpy(f.v.data(), p, n * 4);
      break;
    case safetensors::Dtype::F16:
    case safetensors::Dtype::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        f.v[i] = t.dtype == safetensors::Dtype::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      break;
    default:
      throw Error(file + ": tensor " + t.name + " is " + safetensors::dtype_name(t.dtype) +
                  " (a LoRA's factors are F32, F16 or BF16)");
  }
  for (float x : f.v)
    if (!std::isfinite(x)) throw Error(file + ": tensor " + t.name + " holds a value that is not finite");
  return f;
}

// [a, b, 1, 1] -> [a, b]; other shapes as they are.
std::vector<int64_t> squeezed(std::vector<int64_t> s) {
  while (s.size() > 2 && s.back() == 1) s.pop_back();
  return s;
}

// a [m, k] · b [k, n] -> [m, n].
LoraFactor matmul(const LoraFactor& a, const LoraFactor& b, int64_t m, int64_t k, int64_t n) {
  LoraFactor c;
  c.shape = {m, n};
  c.v.assign(static_cast<size_t>(m * n), 0.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const float x = a.v[static_cast<size_t>(i * k + j)];
      const float* br = b.v.data() + j * n;
      float* cr = c.v.data() + i * n;
      for (int64_t l = 0; l < n; ++l) cr[l] += x * br[l];
    }
  return c;
}

// PEFT's lora_adapter_metadata for one component ("unet", "text_encoder").
struct PeftConfig {
  std::optional<double> alpha;
  bool rslora = false;
  std::map<string, double> alpha_pattern;
};

std::map<string, PeftConfig> peft_configs(const safetensors::File& f) {
  std::map<string, PeftConfig> out;
  auto it = f.metadata().find("lora_adapter_metadata");
  if (it == f.metadata().end()) return out;
  json j;
  try {
    j = json::parse(it->second);
  } catch (const json::exception& e) {
    throw Error(f.path() + ": lora_adapter_metadata is not JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(f.path() + ": lora_adapter_metadata is not a JSON object");
  for (const char* comp : {"unet", "text_encoder", "text_encoder_2"}) {
    PeftConfig c;
    const string p = string(comp) + ".";
    if (j.contains(p + "lora_alpha")) {
      const json& a = j[p + "lora_alpha"];
      if (!a.is_number() || !std::isfinite(a.get<double>()))
        throw Error(f.path() + ": lora_adapter_metadata " + p + "lora_alpha is not a finite number");
      c.alpha = a.get<double>();
    }
    if (j.contains(p + "use_rslora") && j[p + "use_rslora"].is_boolean()) c.rslora = j[p + "use_rslora"].get<bool>();
    if (j.contains(p + "alpha_pattern") && j[p + "alpha_pattern"].is_object())
      for (const auto& [k, v] : j[p + "alpha_pattern"].items()) {
        if (!v.is_number() || !std::isfinite(v.get<double>()))
          throw Error(f.path() + ": lora_adapter_metadata " + p + "alpha_pattern." + k + " is not a finite number");
        c.alpha_pattern[k] = v.get<double>();
      }
    out[comp] = std::move(c);
  }
  return out;
}

std::optional<double> pattern_alpha(const PeftConfig& c, const string& module) {
  for (const auto& [k, v] : c.alpha_pattern)
    if (module == k || module.ends_with("." + k)) return v;
  return c.alpha;
}

// The module's LoraModule from its parts; shapes checked against `want`
// (the base weight's torch shape).
LoraModule build(const string& target, const Group& g, const std::vector<int64_t>& want, const string& file,
                 const std::map<string, PeftConfig>& peft) {
  LoraModule m;
  m.target = target;
  auto has = [&](Part p) { return g.parts.count(p) > 0; };
  auto get = [&](Part p) { return read(*g.parts.at(p), file); };
  const string where = file + ": " + g.module;
  auto need = [&](Part p, Part other) {
    if (!has(other))
      throw Error(where + ": " + part_name(p) + " without its " + part_name(other));
  };
  const int64_t out = want[0], cols = numel(want) / std::max<int64_t>(out, 1);
  const int64_t in = want.size() > 1 ? want[1] : 1, kk = in > 0 ? cols / in : 1;
  auto misfit = [&](const string& what, const std::vector<int64_t>& got) {
    throw Error(where + ": " + what + " gives " + dims(got) + ", the base weight " + target + " is " + dims(want));
  };
  std::optional<double> alpha;
  if (has(Part::Alpha)) {
    const safetensors::TensorInfo& a = *g.parts.at(Part::Alpha);
    if (a.n_elements != 1) throw Error(where + ": alpha has " + std::to_string(a.n_elements) + " values, not one");
    float v = 0;
    if (a.dtype == safetensors::Dtype::F32 || a.dtype == safetensors::Dtype::F16 || a.dtype == safetensors::Dtype::BF16) {
      try {
        v = read(a, file).v[0];
      } catch (const Error&) {
        throw Error(where + ": alpha is not a finite number");
      }
    } else {
      throw Error(where + ": alpha is " + safetensors::dtype_name(a.dtype) + ", not a float");
    }
    alpha = v;
  }
  const int n_kinds = (has(Part::Down) || has(Part::Up)) + (has(Part::W1a) || has(Part::W1b) || has(Part::W2a) || has(Part::W2b)) +
                      (has(Part::Kw1) || has(Part::Kw1a) || has(Part::Kw1b) || has(Part::Kw2) || has(Part::Kw2a) || has(Part::Kw2b)) +
                      has(Part::Diff);
  if (n_kinds == 0) throw Error(where + ": alpha without any factors");
  if (n_kinds > 1) throw Error(where + ": parts of several kinds (LoRA, LoHa, LoKr, diff) for one weight");
  if (has(Part::Down) || has(Part::Up)) {
    need(Part::Down, Part::Up);
    need(Part::Up, Part::Down);
    m.kind = LoraKind::LoRA;
    LoraFactor up = get(Part::Up), down = get(Part::Down);
    const std::vector<int64_t> us = squeezed(up.shape);
    if (us.size() != 2 || down.shape.size() < 2) misfit("lora_up " + dims(up.shape) + " · lora_down", down.shape);
    const int64_t r = down.shape[0];
    if (us[1] != r)
      throw Error(where + ": lora_up " + dims(up.shape) + " has rank " + std::to_string(us[1]) + ", lora_down " +
                  dims(down.shape) + " rank " + std::to_string(r));
    if (us[0] != out || numel(down.shape) / std::max<int64_t>(r, 1) != cols || r == 0)
      misfit("lora_up " + dims(up.shape) + " · lora_down " + dims(down.shape), {us[0], numel(down.shape) / std::max<int64_t>(r, 1)});
    const string comp = target.substr(0, target.find('.'));
    const string module = target.substr(comp.size() + 1, target.size() - comp.size() - 8);
    bool rs = false;
    if (!alpha && g.peft) {
      auto it = peft.find(comp);
      if (it != peft.end()) alpha = pattern_alpha(it->second, module), rs = it->second.rslora;
    }
    m.scale = alpha ? static_cast<float>(*alpha / (rs ? std::sqrt(double(r)) : double(r))) : 1.0f;
    up.shape = us;
    m.f = {std::move(up), std::move(down)};
  } else if (has(Part::W1a) || has(Part::W1b) || has(Part::W2a) || has(Part::W2b)) {
    for (Part p : {Part::W1a, Part::W1b, Part::W2a, Part::W2b})
      if (!has(p)) throw Error(where + ": a LoHa without its " + part_name(p));
    m.kind = LoraKind::LoHa;
    LoraFactor a1 = get(Part::W1a), b1 = get(Part::W1b), a2 = get(Part::W2a), b2 = get(Part::W2b);
    for (auto [a, b, an, bn] : {std::tuple{&a1, &b1, "hada_w1_a", "hada_w1_b"}, std::tuple{&a2, &b2, "hada_w2_a", "hada_w2_b"}}) {
      a->shape = squeezed(a->shape);
      if (a->shape.size() != 2 || b->shape.size() < 2 || a->shape[1] != b->shape[0])
        throw Error(where + ": " + an + " " + dims(a->shape) + " and " + bn + " " + dims(b->shape) + " do not multiply");
      if (a->shape[0] != out || numel(b->shape) / std::max<int64_t>(b->shape[0], 1) != cols || b->shape[0] == 0)
        misfit(string(an) + " · " + bn, {a->shape[0], numel(b->shape) / std::max<int64_t>(b->shape[0], 1)});
    }
    m.scale = alpha ? static_cast<float>(*alpha / double(b1.shape[0])) : 1.0f;
    m.f = {std::move(a1), std::move(b1), std::move(a2), std::move(b2)};
  } else if (has(Part::Diff)) {
    m.kind = LoraKind::Full;
    LoraFactor d = get(Part::Diff);
    if (d.shape.empty() || numel(d.shape) != numel(want) || d.shape[0] != out) misfit("diff", d.shape);
    m.f = {std::move(d)};
    m.scale = 1.0f;
  } else {
    m.kind = LoraKind::LoKr;
    std::optional<int64_t> dim;
    auto factor = [&](Part whole, Part pa, Part pb, const char* name) {
      if (has(whole)) {
        if (has(pa) || has(pb)) throw Error(where + ": both " + string(name) + " and its _a/_b factors");
        return get(whole);
      }
      need(pa, pb);
      need(pb, pa);
      LoraFactor a = get(pa), b = get(pb);
      a.shape = squeezed(a.shape);
      if (a.shape.size() != 2 || b.shape.size() < 2 || a.shape[1] != b.shape[0])
        throw Error(where + ": " + name + "_a " + dims(a.shape) + " and " + name + "_b " + dims(b.shape) +
                    " do not multiply");
      dim = b.shape[0];
      const int64_t rows = a.shape[0], n = numel(b.shape) / std::max<int64_t>(b.shape[0], 1), all = numel(want);
      if (rows > all || n > all || rows * n > all)  // a kron factor is never larger than the weight
        misfit(string(name) + "_a · " + name + "_b", {rows, n});
      return matmul(a, b, rows, a.shape[1], n);
    };
    LoraFactor w1 = factor(Part::Kw1, Part::Kw1a, Part::Kw1b, "lokr_w1");
    LoraFactor w2 = factor(Part::Kw2, Part::Kw2a, Part::Kw2b, "lokr_w2");
    w1.shape = squeezed(w1.shape);
    if (w1.shape.size() != 2 || w2.shape.empty()) misfit("kron(lokr_w1, lokr_w2)", w1.shape);
    const int64_t o1 = w1.shape[0], i1 = w1.shape[1], o2 = w2.shape[0];
    const int64_t w2cols = numel(w2.shape) / std::max<int64_t>(o2, 1);
    const int64_t i2 = kk > 0 && w2cols % kk == 0 ? w2cols / kk : -1;
    if (o1 * o2 != out || i2 < 0 || i1 * i2 != in || i1 == 0 || o2 == 0)
      misfit("kron(lokr_w1 " + dims(w1.shape) + ", lokr_w2 " + dims(w2.shape) + ")", {o1 * o2, i1 * std::max<int64_t>(i2, 0), kk});
    w2.shape = {o2, w2cols, i2};  // [o2, i2·kk] and i2 (lora_delta)
    m.scale = alpha && dim ? static_cast<float>(*alpha / double(*dim)) : 1.0f;
    m.f = {std::move(w1), std::move(w2)};
  }
  return m;
}

}  // namespace

LoraTargets::LoraTargets(const Pipeline& pl) {
  for (const SourceTensor& t : pl.weights->tensors()) {
    const string& n = t.name;
    if (!n.ends_with(".weight") || t.n_dims < 2) continue;
    string comp;
    for (const char* c : {"unet.", "text_encoder.", "text_encoder_2."})
      if (n.starts_with(c)) comp = c;
    if (comp.empty()) continue;
    std::vector<int64_t> shape;
    for (int i = t.n_dims - 1; i >= 0; --i) shape.push_back(t.ne[i]);
    shapes_[n] = shape;
    const string module = n.substr(comp.size(), n.size() - comp.size() - 7);
    if (comp == "unet.") {
      kohya_["lora_unet_" + underscored(module)] = n;
      const string ldm = unet_ldm_name(module + ".weight", pl.unet);
      if (ldm.ends_with(".weight")) ldm_kohya_["lora_unet_" + underscored(ldm.substr(0, ldm.size() - 7))] = n;
    } else {
      // transformers 5 dropped CLIPTextModel's text_model level from its module
      // tree (not from checkpoints), so LoRAs trained since name modules without it
      std::vector<string> spellings = {module};
      if (module.starts_with("text_model.")) {
        spellings.push_back(module.substr(11));
        aliases_[comp + module.substr(11) + ".weight"] = n;
      }
      for (const string& m : spellings) {
        if (comp == "text_encoder.") {
          kohya_["lora_te_" + underscored(m)] = n;
          kohya_["lora_te1_" + underscored(m)] = n;
        } else {
          kohya_["lora_te2_" + underscored(m)] = n;
        }
      }
    }
  }
}

const std::vector<int64_t>* LoraTargets::shape(std::string_view name) const {
  auto it = shapes_.find(name);
  return it == shapes_.end() ? nullptr : &it->second;
}

std::string LoraTargets::place(std::string_view module_sv, std::string* spelling) const {
  string module(module_sv);
  if (module.starts_with("lora_unet_") || module.starts_with("lora_te")) {
    if (auto it = kohya_.find(module); it != kohya_.end()) {
      if (spelling) *spelling = "kohya";
      return it->second;
    }
    if (auto it = ldm_kohya_.find(module); it != ldm_kohya_.end()) {
      if (spelling) *spelling = "kohya (ldm names)";
      return it->second;
    }
    return "";
  }
  if (module.starts_with("base_model.model.")) module = "unet." + module.substr(17);
  // diffusers' attention processors: <attn>.processor.to_q_lora -> <attn>.to_q
  if (const size_t p = module.rfind(".processor."); p != string::npos) {
    string tail = module.substr(p + 11);
    if (tail == "to_out") tail = "to_out.0";
    module = module.substr(0, p + 1) + tail;
  }
  string name = module + ".weight";
  if (auto it = aliases_.find(name); it != aliases_.end()) name = it->second;
  if (!shapes_.count(name)) return "";
  if (spelling) *spelling = "PEFT";
  return name;
}

std::shared_ptr<const ImageLora> parse_image_lora(const uint8_t* data, size_t size, const std::string& name,
                                                  const LoraTargets& targets, const LoraLoadOptions& o) {
  const std::unique_ptr<safetensors::File> f = safetensors::File::parse(data, size, name);
  const std::map<string, PeftConfig> peft = peft_configs(*f);
  std::map<string, Group> groups;
  std::vector<string> unplaced;
  std::map<string, int> spellings;
  for (const safetensors::TensorInfo& t : f->tensors()) {
    const Suffix* s = nullptr;
    for (const Suffix& x : kSuffixes)
      if (t.name.ends_with(x.text) && t.name.size() > std::strlen(x.text) &&
          (!s || std::strlen(x.text) > std::strlen(s->text)))
        s = &x;
    if (s && s->part == Part::Unsupported)
      throw Error(name + ": tensor " + t.name + " is part of " + s->why + ", which kvad does not apply");
    string spelling;
    const string module = s ? t.name.substr(0, t.name.size() - std::strlen(s->text)) : "";
    const string target = s ? targets.place(module, &spelling) : "";
    if (target.empty()) {
      unplaced.push_back(t.name);
      continue;
    }
    Group& g = groups[target];
    if (g.module.empty()) g.module = module;
    g.peft |= spelling == "PEFT";
    ++spellings[spelling];
    if (!g.parts.emplace(s->part, &t).second)
      throw Error(name + ": tensor " + t.name + " is a second " + part_name(s->part) + " for " + target);
  }
  if (!unplaced.empty()) {
    string list;
    for (size_t i = 0; i < unplaced.size() && i < 3; ++i) list += (i ? ", " : "") + unplaced[i];
    if (unplaced.size() > 3) list += ", ...";
    const string what = std::to_string(unplaced.size()) + " of its " + std::to_string(f->tensors().size()) +
                        " tensors fit no weight of this pipeline: " + list;
    if (!o.allow_partial) throw Error(name + ": " + what + " (a LoRA for another model, or a spelling kvad does not know)");
    std::fprintf(stderr, "kvad: warning: %s: %s; they are skipped\n", name.c_str(), what.c_str());
  }
  if (groups.empty()) throw Error(name + ": no LoRA weights kvad can place on this pipeline");
  auto lora = std::make_shared<ImageLora>();
  lora->path = name;
  for (const auto& [sp, n] : spellings) lora->spelling += (lora->spelling.empty() ? "" : " + ") + sp;
  for (const auto& [target, g] : groups) {
    LoraModule m = build(target, g, *targets.shape(target), name, peft);
    for (const LoraFactor& x : m.f) lora->bytes += x.v.size() * 4;
    (target.starts_with("unet.") ? lora->touches_unet : lora->touches_text) = true;
    lora->modules.push_back(std::move(m));
  }
  return lora;
}

std::shared_ptr<const ImageLora> load_image_lora(const std::string& path, const LoraTargets& targets,
                                                 const LoraLoadOptions& o) {
  const std::unique_ptr<safetensors::File> f = safetensors::File::open(path);
  return parse_image_lora(f->file_data(), f->file_size(), path, targets, o);
}

}  // namespace kvad::image
