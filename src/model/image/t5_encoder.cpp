#include "model/image/t5_encoder.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "model/image/config_json.h"
#include "io/tensor_source.h"
#include "model/image/layers.h"
#include "model/image/pipeline.h"
#include "tensor/ops.h"

namespace kvad::image {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int64_t kMaxTokens = 4096;  // the bias and the scores are n² · num_heads floats each

using config::get_int;
using config::present;

// What ACT2FN gives for a T5 dense_act_fn, as kvad's op names it.
bool known_act(const std::string& a) {
  return a == "relu" || a == "gelu" || a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "silu" || a == "swish";
}

// relu(x) = x − min(x, 0), exactly: swiglu_oai with alpha 0 and limit 0 is
// (clamp(x, 0, 0) + 1) · min(x, 0) · σ(0) = min(x, 0) / 2, computed exactly.
Tensor relu(const Tensor& x) { return ops::add(x, ops::scale(ops::swiglu_oai(x, x, 0.0f, 0.0f), -2.0f)); }

Tensor activation(const Tensor& x, const std::string& a) {
  if (a == "relu") return relu(x);
  if (a == "gelu") return ops::gelu_erf(x);  // ACT2FN["gelu"]: the exact GELU
  if (a == "gelu_new" || a == "gelu_pytorch_tanh") return ops::gelu(x);
  return ops::silu(x);  // silu, swish
}

Tensor gated(const Tensor& gate, const Tensor& up, const std::string& a) {
  if (a == "gelu") return ops::geglu_erf(gate, up);
  if (a == "gelu_new" || a == "gelu_pytorch_tanh") return ops::geglu(gate, up);
  if (a == "relu") return ops::mul(relu(gate), up);
  return ops::swiglu(gate, up);
}

}  // namespace

T5Config parse_t5_config(const json& cfg, const std::string& name) {
  if (!cfg.is_object()) throw Error(name + ": not a JSON object");
  T5Config c;
  c.vocab_size = get_int(cfg, "vocab_size", c.vocab_size, name);
  c.d_model = get_int(cfg, "d_model", c.d_model, name);
  c.d_kv = get_int(cfg, "d_kv", c.d_kv, name);
  c.d_ff = get_int(cfg, "d_ff", c.d_ff, name);
  c.num_layers = get_int(cfg, "num_layers", c.num_layers, name);
  c.num_heads = get_int(cfg, "num_heads", c.num_heads, name);
  c.relative_attention_num_buckets = get_int(cfg, "relative_attention_num_buckets", 32, name);
  c.relative_attention_max_distance = get_int(cfg, "relative_attention_max_distance", 128, name);
  if (present(cfg, "layer_norm_epsilon")) {
    if (!cfg["layer_norm_epsilon"].is_number()) throw Error(name + ": layer_norm_epsilon is not a number");
    c.layer_norm_epsilon = cfg["layer_norm_epsilon"].get<double>();
    if (!(c.layer_norm_epsilon >= 0) || !std::isfinite(c.layer_norm_epsilon))
      throw Error(name + ": layer_norm_epsilon is not a finite number >= 0");
  }
  if (present(cfg, "feed_forward_proj")) {
    if (!cfg["feed_forward_proj"].is_string()) throw Error(name + ": feed_forward_proj is not a string");
    c.feed_forward_proj = cfg["feed_forward_proj"].get<std::string>();
  }
  // T5Config.__init__: "ACT" or "gated-ACT"; "gated-gelu" means gelu_new.
  const std::string& f = c.feed_forward_proj;
  const size_t dash = f.find('-');
  c.is_gated_act = dash != std::string::npos && f.substr(0, dash) == "gated";
  c.dense_act_fn = dash == std::string::npos ? f : f.substr(dash + 1);
  if ((dash != std::string::npos && !c.is_gated_act) || c.dense_act_fn.find('-') != std::string::npos)
    throw Error(name + ": feed_forward_proj '" + f + "' is not of the form ACT or gated-ACT");
  if (f == "gated-gelu") c.dense_act_fn = "gelu_new";
  if (!known_act(c.dense_act_fn))
    throw Error(name + ": feed_forward_proj '" + f + "': activation '" + c.dense_act_fn +
                "' is not one kvad runs (relu, gelu, gelu_new, gelu_pytorch_tanh, silu)");
  if (present(cfg, "pad_token_id") && cfg["pad_token_id"].is_number_integer())
    c.pad_token_id = cfg["pad_token_id"].get<int64_t>();
  if (present(cfg, "eos_token_id") && cfg["eos_token_id"].is_number_integer())
    c.eos_token_id = cfg["eos_token_id"].get<int64_t>();
  if (c.relative_attention_num_buckets < 4)
    throw Error(name + ": relative_attention_num_buckets " + std::to_string(c.relative_attention_num_buckets) +
                " is below 4 (two exact and two logarithmic buckets each way)");
  return c;
}

int32_t t5_relative_position_bucket(int64_t rel, int64_t num_buckets, int64_t max_distance) {
  const int64_t half = num_buckets / 2;  // bidirectional: keys after the query use the upper half
  int64_t bucket = rel > 0 ? half : 0;
  const int64_t a = rel < 0 ? -rel : rel;
  const int64_t max_exact = half / 2;
  if (a < max_exact) return static_cast<int32_t>(bucket + a);
  // torch: log(float(a) / max_exact) / math.log(max_distance / max_exact) * (half - max_exact), in f32, truncated.
  const float l = std::log(static_cast<float>(a) / static_cast<float>(max_exact)) /
                  static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact))) *
                  static_cast<float>(half - max_exact);
  const int64_t large = std::min<int64_t>(max_exact + static_cast<int64_t>(l), half - 1);
  return static_cast<int32_t>(bucket + large);
}

T5Encoder::T5Encoder(const WeightScope& scope, const T5Config& c) : c_(c), dev_(scope.device()) {
  const int64_t E = c.d_model, I = c.num_heads * c.d_kv, F = c.d_ff;
  // T5EncoderModel ties encoder.embed_tokens to shared; a checkpoint holds either or both.
  const bool has_shared = scope.has("shared.weight");
  if (scope.has("encoder.embed_tokens.weight")) embed_ = scope.get("encoder.embed_tokens.weight", {E, c.vocab_size});
  if (has_shared || !embed_) embed_ = scope.get("shared.weight", {E, c.vocab_size});
  final_ln_ = vector_f32(scope, "encoder.final_layer_norm.weight", E);
  for (int64_t il = 0; il < c.num_layers; ++il) {
    const WeightScope l = scope.sub("encoder.block." + std::to_string(il) + ".layer");
    const WeightScope a = l.sub("0.SelfAttention"), ff = l.sub("1.DenseReluDense");
    Block b;
    b.ln1 = vector_f32(l, "0.layer_norm.weight", E);
    b.wq = a.get("q.weight", {E, I}), b.wk = a.get("k.weight", {E, I}), b.wv = a.get("v.weight", {E, I});
    b.wo = a.get("o.weight", {I, E});
    if (il == 0) rel_bias_ = a.get("relative_attention_bias.weight", {c.num_heads, c.relative_attention_num_buckets});
    b.ln2 = vector_f32(l, "1.layer_norm.weight", E);
    if (c.is_gated_act) {
      b.wi0 = ff.get("wi_0.weight", {E, F}), b.wi1 = ff.get("wi_1.weight", {E, F});
    } else {
      b.wi0 = ff.get("wi.weight", {E, F});
    }
    b.wff_o = ff.get("wo.weight", {F, E});
    // transformers keeps `wo` in f32 (_keep_in_fp32_modules): its input passes f16's range in T5 v1.1.
    if (b.wff_o.type == DType::F16) b.wff_o = ops::convert(b.wff_o, DType::F32);
    blocks_.push_back(std::move(b));
  }
}

std::unique_ptr<T5Encoder> T5Encoder::load(const std::string& dir, const DeviceOptions& o, const std::string& variant) {
  const fs::path cfg_path = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(cfg_path, ec)) throw Error(cfg_path.string() + ": no such file");
  if (fs::file_size(cfg_path, ec) > (16u << 20)) throw Error(cfg_path.string() + ": larger than 16 MiB, not a config");
  std::ifstream in(cfg_path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(cfg_path.string() + ": invalid JSON: " + e.what());
  }
  const T5Config c = parse_t5_config(j, cfg_path.string());
  WeightLoader wl(component_weights(dir, variant), o);
  auto enc = std::make_unique<T5Encoder>(wl.root(), c);
  wl.finish();
  return enc;
}

Tensor T5Encoder::encode(std::span<const int32_t> ids) const {
  const int64_t n = static_cast<int64_t>(ids.size()), H = c_.num_heads, D = c_.d_kv;
  if (n < 1 || n > kMaxTokens)
    throw Error("T5 encoder: " + std::to_string(n) + " tokens, outside 1.." + std::to_string(kMaxTokens));
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c_.vocab_size)
      throw Error("T5 encoder: token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary of " + std::to_string(c_.vocab_size));
  const Tensor tid = ops::from_host(ids.data(), DType::I32, {n, 1, 1, 1}, dev_);
  Tensor x = ops::get_rows(embed_, tid);  // [n, E]

  // position_bias [H, n_q, n_k] = R[bucket(k - q), h], once for every layer (T5Attention.compute_bias).
  std::vector<int32_t> buckets(static_cast<size_t>(n * n));
  for (int64_t q = 0; q < n; ++q)
    for (int64_t k = 0; k < n; ++k)
      buckets[q * n + k] = t5_relative_position_bucket(k - q, c_.relative_attention_num_buckets,
                                                       c_.relative_attention_max_distance);
  const Tensor tb = ops::from_host(buckets.data(), DType::I32, {n * n, 1, 1, 1}, dev_);
  const Tensor bias_qkh = ops::get_rows(rel_bias_, tb).view({H, n, n, 1});  // [n_q, n_k, H]
  const Tensor bias = ops::cont(ops::permute(bias_qkh, {2, 0, 1, 3}));     // [H, n_q, n_k]

  const float eps = static_cast<float>(c_.layer_norm_epsilon);
  for (const Block& b : blocks_) {
    const Tensor h = ops::rms_norm(x, b.ln1, eps);  // T5LayerNorm
    const std::vector<Tensor> qkv = ops::matmul_multi(h, {&b.wq, &b.wk, &b.wv});
    // Per head: [H, n, D] views of q (strided) and contiguous K, Vᵀ for the batched products.
    const Tensor q = ops::permute(qkv[0].view({D, H, n, 1}), {0, 2, 1, 3});          // [H, n, D]
    const Tensor k = ops::cont(ops::permute(qkv[1].view({D, H, n, 1}), {0, 2, 1, 3}));  // [H, n, D]
    const Tensor vt = ops::cont(ops::permute(qkv[2].view({D, H, n, 1}), {1, 2, 0, 3}));  // [H, D, n]
    const Tensor p = ops::softmax(ops::add(ops::matmul_batched(q, k), bias));  // [H, n_q, n_k], no 1/√D
    const Tensor a = ops::matmul_batched(p, vt);                                // [H, n_q, D]
    const Tensor merged = ops::cont(ops::permute(a, {0, 2, 1, 3})).view({H * D, n, 1, 1});  // [n, H·D]
    x = ops::add(x, ops::matmul(merged, b.wo));
    const Tensor g = ops::rms_norm(x, b.ln2, eps);
    Tensor f;
    if (c_.is_gated_act) {
      const std::vector<Tensor> gu = ops::matmul_multi(g, {&b.wi0, &b.wi1});
      f = gated(gu[0], gu[1], c_.dense_act_fn);  // [n, F]
    } else {
      f = activation(ops::matmul(g, b.wi0), c_.dense_act_fn);
    }
    x = ops::add(x, ops::matmul(f, b.wff_o));
  }
  return ops::rms_norm(x, final_ln_, eps);  // final_layer_norm; [n, E]
}

}  // namespace kvad::image
