#include "io/generation_config.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace kvad {

namespace {

using json = nlohmann::json;

const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::optional<float> number(const json& j, const std::string& name, const char* key, double lo, double hi) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw Error(name + ": " + key + " must be a number");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) throw Error(name + ": " + key + " = " + v->dump() + " is out of range");
  return static_cast<float>(x);
}

}  // namespace

std::string GenerationConfig::sampling_summary() const {
  std::string s;
  auto add = [&](const char* k, const std::string& v) { s += (s.empty() ? "" : ", ") + std::string(k) + " " + v; };
  auto num = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", x);
    return std::string(b);
  };
  if (do_sample) add("do_sample", *do_sample ? "true" : "false");
  if (temperature) add("temperature", num(*temperature));
  if (top_k) add("top_k", std::to_string(*top_k));
  if (top_p) add("top_p", num(*top_p));
  if (min_p) add("min_p", num(*min_p));
  if (repetition_penalty) add("repetition_penalty", num(*repetition_penalty));
  return s;
}

GenerationConfig parse_generation_config(std::string_view text, const std::string& name) {
  if (text.size() > (1u << 20)) throw Error(name + ": larger than 1 MiB");
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    throw Error(name + ": invalid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(name + ": expected a JSON object");
  GenerationConfig c;
  if (const json* e = field(j, "eos_token_id")) {
    for (const json& v : e->is_array() ? *e : json::array({*e})) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
        throw Error(name + ": eos_token_id must be a token id or a list of token ids");
      c.eos_token_id.push_back(v.get<int32_t>());
    }
  }
  if (const json* d = field(j, "do_sample")) {
    if (!d->is_boolean()) throw Error(name + ": do_sample must be a boolean");
    c.do_sample = d->get<bool>();
  }
  c.temperature = number(j, name, "temperature", 0, 1e6);
  if (const json* k = field(j, "top_k")) {
    if (!k->is_number_integer() || k->get<int64_t>() < 0 || k->get<int64_t>() > INT32_MAX)
      throw Error(name + ": top_k must be a non-negative integer");
    c.top_k = k->get<int32_t>();
  }
  c.top_p = number(j, name, "top_p", 0, 1);
  c.min_p = number(j, name, "min_p", 0, 1);
  c.repetition_penalty = number(j, name, "repetition_penalty", 1e-6, 1e6);
  return c;
}

GenerationConfig read_generation_config(const std::string& dir) {
  const std::string path = dir + "/generation_config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > (1u << 20)) throw Error(path + ": larger than 1 MiB");
  }
  return parse_generation_config(text, path);
}

}  // namespace kvad
