#include "hf_checkpoint_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/session.h"
#include "io/gguf.h"
#include "model/hf.h"
#include "model/registry.h"

namespace kvad::hf_test {

const fs::path kDir = fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "hf_tiny";

Reference read_reference(const fs::path& dir, const char* file) {
  std::ifstream in(dir / file);
  const nlohmann::json j = nlohmann::json::parse(in);
  Reference r;
  r.tokens = j["tokens"].get<std::vector<int32_t>>();
  r.logits = j["logits"].get<std::vector<std::vector<float>>>();
  return r;
}

double rel_err(const std::vector<float>& want, const float* got) {
  double d = 0, m = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d = std::max(d, std::fabs(double(want[i]) - got[i]));
    m = std::max(m, std::fabs(double(want[i])));
  }
  return d / m;
}

double check_source(const char* name, const char* label, std::shared_ptr<const kvad::TensorSource> src,
                    const char* device, int n_check, double tol, const char* against,
                    int32_t n_ctx, kvad::KVTypes kv) {
  const std::string vs = against;
  const Reference ref = read_reference(kDir / name, vs == "transformers"              ? "logits.json"
                                                    : vs == "transformers (truncate)" ? "logits-truncate.json"
                                                    : vs == "transformers-kv-f16"     ? "logits-kv-f16.json"
                                                                                      : "llama.cpp-f32.logits.json");
  kvad::DeviceOptions o;
  o.device = device;
  o.dtype = "f32";  // cuda: keep the checkpoint's f32 (cpu and sim always do)
  std::shared_ptr<kvad::Model> m = kvad::load_model(std::move(src), o);
  const int64_t V = m->hparams().n_vocab;
  EXPECT_EQ(V, static_cast<int64_t>(ref.logits[0].size()));
  if (V != static_cast<int64_t>(ref.logits[0].size())) return 1;
  const int n = n_check ? n_check : static_cast<int>(ref.tokens.size());
  // One prefill with logits at every position.
  kvad::Session s(m, n_ctx, 1, 2, kv);
  kvad::Batch b;
  for (int i = 0; i < n; ++i) b.add(ref.tokens[i], i, 0, true);
  const std::vector<float>& all = s.forward(b);
  double worst = 0;
  for (int i = 0; i < n; ++i) worst = std::max(worst, rel_err(ref.logits[i], &all[i * V]));
  // Token by token.
  kvad::Session t(m, n_ctx, 1, 1, kv);
  double worst_step = 0;
  for (int i = 0; i < n; ++i) {
    kvad::Batch d;
    d.add(ref.tokens[i], i, 0, true);
    worst_step = std::max(worst_step, rel_err(ref.logits[i], t.forward(d).data()));
  }
  std::printf("%s%s on %s, %s KV cache: max |diff| / max |logit| vs %s: prefill %.2e, step by step %.2e\n", name,
              label, device, kv.k == kvad::DType::F32 ? "f32" : "f16", against, worst, worst_step);
  EXPECT_LT(worst, tol) << name << label << " on " << device;
  EXPECT_LT(worst_step, tol) << name << label << " on " << device;
  return std::max(worst, worst_step);
}

void check(const char* name, const char* device, double tol32) {
  const auto src = kvad::open_hf_checkpoint((kDir / name).string());
  check_source(name, "", src, device, 0, tol32, "transformers", 64, {kvad::DType::F32, kvad::DType::F32});
  check_source(name, "", src, device, 0, 1e-3, "transformers", 64, {});
}

std::shared_ptr<const kvad::TensorSource> llama_cpp_gguf(const char* name) {
  return kvad::gguf_source(kvad::gguf::File::open((kDir / name / "llama.cpp-f32.gguf").string()));
}

std::string error_of(const std::string& config, const char* from) {
  Scratch s(config, from);
  try {
    kvad::load_model(kvad::open_hf_checkpoint(s.dir.string()), kvad::DeviceOptions{});
  } catch (const kvad::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace kvad::hf_test
