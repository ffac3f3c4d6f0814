#include "model/hparams.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <utility>

#include "base/error.h"
#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/weights.h"

namespace kvad {

namespace {
// A GGUF bool (llama.cpp's converter writes expert_weights_norm so), or an
// integer (kvad's HF view and the quantize-once files it writes).
bool get_flag(const TensorSource& src, const std::string& key) {
  if (const std::shared_ptr<const gguf::File> f = gguf_file(src))
    if (const gguf::Value* v = f->find(key); v && v->type() == gguf::ValueType::BOOL) return v->as_bool();
  return src.get_int(key, 0) != 0;
}
}  // namespace

HParams read_hparams(const TensorSource& f) {
  HParams hp;
  hp.arch = f.get_string("general.architecture", "");
  hp.name = f.get_string("general.name", "");
  const std::string a = hp.arch + ".";
  auto need = [&](const std::string& key) {
    const int64_t v = f.require_int(a + key);
    if (v <= 0) throw Error(f.path() + ": " + a + key + " must be positive, is " + std::to_string(v));
    return v;
  };
  hp.n_ctx_train = f.get_int(a + "context_length", 2048);
  hp.n_embd = need("embedding_length");
  hp.n_layer = need("block_count");
  hp.n_head = need("attention.head_count");
  hp.n_head_kv = f.has(a + "attention.head_count_kv") ? need("attention.head_count_kv") : hp.n_head;
  // A MoE model without dense layers (qwen35moe) need not give it: 0 then.
  hp.n_ff = f.has(a + "feed_forward_length") || !f.has(a + "expert_count") ? need("feed_forward_length") : 0;
  hp.head_dim = f.has(a + "attention.key_length") ? need("attention.key_length") : hp.n_embd / hp.n_head;
  hp.n_rot = f.has(a + "rope.dimension_count") ? need("rope.dimension_count") : hp.head_dim;
  hp.norm_eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5));
  hp.rope_freq_base = static_cast<float>(f.get_float(a + "rope.freq_base", 10000.0));
  const double factor = f.get_float(a + "rope.scaling.factor", 1.0);
  const std::string scaling = f.get_string(a + "rope.scaling.type", "none");
  if (scaling == "linear" && factor > 0) hp.rope_freq_scale = static_cast<float>(1.0 / factor);
  // Every layer has tensors of its own: more layers than tensors is a bad
  // file, refused before anything is sized by it.
  if (hp.n_layer > static_cast<int64_t>(f.tensors().size()))
    throw Error(f.path() + ": " + a + "block_count " + std::to_string(hp.n_layer) + " is more than the file's " +
                std::to_string(f.tensors().size()) + " tensors");
  // A width or a head count is at most some tensor's dim: one larger than
  // every tensor dim of the file is a bad file (and would size tables by it,
  // or overflow the products of the weights' shapes).
  int64_t most = 0;
  for (const SourceTensor& t : f.tensors()) most = std::max({most, t.ne[0], t.ne[1], t.ne[2], t.ne[3]});
  for (const auto& [key, v] : {std::pair<const char*, int64_t>{"embedding_length", hp.n_embd},
                               {"attention.key_length (head_dim)", hp.head_dim},
                               {"feed_forward_length", hp.n_ff},
                               {"attention.head_count", hp.n_head},
                               {"attention.head_count_kv", hp.n_head_kv}})
    if (v > most)
      throw Error(f.path() + ": " + a + key + " " + std::to_string(v) + " is more than any tensor dim of the file (" +
                  std::to_string(most) + ")");
  if (hp.head_dim <= 0)
    throw Error(f.path() + ": head_dim is 0: " + a + "attention.head_count " + std::to_string(hp.n_head) +
                " is more than embedding_length " + std::to_string(hp.n_embd));
  if (hp.n_head % hp.n_head_kv != 0)
    throw Error(f.path() + ": head_count " + std::to_string(hp.n_head) +
                " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2)
    throw Error(f.path() + ": rope.dimension_count " + std::to_string(hp.n_rot) + " does not fit head_dim " +
                std::to_string(hp.head_dim));
  return hp;
}

int64_t read_vocab(const TensorSource& f, const HParams& hp) {
  const SourceTensor* te = f.find("token_embd.weight");
  if (!te || te->n_dims < 2) throw Error(f.path() + ": missing tensor " + f.tensor_name("token_embd.weight"));
  const int64_t rows = te->ne[1];
  const std::string key = hp.arch + ".vocab_size";
  if (f.has(key) && f.get_int(key, 0) != rows)
    throw Error(f.path() + ": " + f.key_name(key) + " " + std::to_string(f.get_int(key, 0)) + " differs from the " +
                std::to_string(rows) + " rows of tensor " + f.tensor_name("token_embd.weight"));
  return rows;
}

AttentionParams read_attention(const TensorSource& f, const HParams& hp, const RopeParams& rope) {
  const std::string key = hp.arch + ".attention.value_length";
  if (f.has(key) && f.get_int(key, 0) != hp.head_dim)
    throw Error(f.path() + ": " + f.key_name(key) + " " + std::to_string(f.get_int(key, 0)) +
                " differs from the head_dim " + std::to_string(hp.head_dim) + "; not supported");
  AttentionParams p;
  p.n_head = hp.n_head;
  p.n_head_kv = hp.n_head_kv;
  p.head_dim = hp.head_dim;
  p.rope = rope;
  p.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  p.norm_eps = hp.norm_eps;
  return p;
}

SlidingWindow read_sliding_window(const TensorSource& f, const HParams& hp, const SlidingWindowDefaults& d) {
  const std::string a = hp.arch + ".", wkey = a + "attention.sliding_window", pkey = a + "attention.sliding_window_pattern";
  const int64_t window = f.get_int(wkey, d.window);
  if (window < 0 || window > INT32_MAX || (d.required && window == 0))
    throw Error(f.path() + ": " + f.key_name(wkey) + " " + std::to_string(window) +
                (d.required ? " is missing or invalid (" + hp.arch + "'s sliding layers need it)" : " is invalid"));
  SlidingWindow s;
  s.window = static_cast<int32_t>(window);
  s.layers.assign(static_cast<size_t>(hp.n_layer), false);
  if (window == 0) return s;
  if (f.is_array(pkey)) {
    const std::vector<bool> per_layer = f.get_bool_array(pkey);
    if (static_cast<int64_t>(per_layer.size()) != hp.n_layer)
      throw Error(f.path() + ": " + f.key_name(pkey) + " has " + std::to_string(per_layer.size()) + " entries for " +
                  std::to_string(hp.n_layer) + " layers");
    s.layers = per_layer;
    return s;
  }
  const int64_t pattern = f.get_int(pkey, d.pattern);
  if (pattern < 0) throw Error(f.path() + ": " + f.key_name(pkey) + " must not be negative");
  for (int64_t il = 0; il < hp.n_layer; ++il)
    s.layers[static_cast<size_t>(il)] = pattern == 0 || il % pattern < pattern - 1;
  return s;
}

MoeHParams read_moe(const TensorSource& f, const HParams& hp, bool norm_topk_default) {
  const std::string a = hp.arch + ".";
  auto count = [&](const std::string& key, int64_t def) {
    const int64_t v = f.get_int(a + key, def);
    if (v < 0) throw Error(f.path() + ": " + f.key_name(a + key) + " " + std::to_string(v) + " is invalid");
    return v;
  };
  MoeHParams m;
  m.n_expert = count("expert_count", 0);
  m.n_ff_exp = count("expert_feed_forward_length", 0);
  m.n_ff_shexp = count("expert_shared_feed_forward_length", 0);
  m.n_shared = count("expert_shared_count", 0);
  MoeParams& r = m;
  r.n_expert_used = count("expert_used_count", 0);
  // llama.cpp's converter writes expert_weights_norm as a GGUF bool (read
  // as 0/1 here); kvad's HF view writes kvad.moe.norm_topk_prob.
  r.norm_topk = f.has(a + "expert_weights_norm") ? get_flag(f, a + "expert_weights_norm")
                                                 : f.get_int("kvad.moe.norm_topk_prob", norm_topk_default ? 1 : 0) != 0;
  r.scale = static_cast<float>(f.get_float(a + "expert_weights_scale", 1.0));
  const int64_t gating = f.get_int(a + "expert_gating_func", 1);
  if (gating != 1 && gating != 2)
    throw Error(f.path() + ": " + f.key_name(a + "expert_gating_func") + " " + std::to_string(gating) +
                " is not 1 (softmax) or 2 (sigmoid)");
  r.gating = gating == 2 ? MoeGating::Sigmoid : MoeGating::Softmax;
  r.n_group = f.get_int(a + "expert_group_count", 1);
  r.topk_group = f.get_int(a + "expert_group_used_count", r.n_group);
  r.norm_eps = hp.norm_eps;
  return m;
}

void name_dims(WeightLoader& wl, const HParams& hp, const MoeHParams& m) {
  const std::string a = hp.arch + ".";
  if (m.n_expert > 0) wl.name_key_dim(m.n_expert, a + "expert_count");
  if (m.n_ff_exp > 0) wl.name_key_dim(m.n_ff_exp, a + "expert_feed_forward_length");
  if (m.n_ff_shexp > 0) wl.name_key_dim(m.n_ff_shexp, a + "expert_shared_feed_forward_length");
}

void require_experts(const TensorSource& f, const HParams& hp, const MoeHParams& m, const std::string& what) {
  const MoeParams& r = m;
  const bool groups_ok = r.n_group > 0 && m.n_expert % r.n_group == 0 && r.topk_group > 0 &&
                         r.topk_group <= r.n_group && r.n_expert_used <= r.topk_group * (m.n_expert / r.n_group);
  if (m.n_expert > 0 && m.n_ff_exp > 0 && r.n_expert_used > 0 && r.n_expert_used <= m.n_expert && groups_ok) return;
  const std::string a = hp.arch + ".";
  throw Error(f.path() + ": " + what + " needs " + f.key_name(a + "expert_count") + ", " +
              f.key_name(a + "expert_used_count") + " (1.." + a + "expert_count) and " +
              f.key_name(a + "expert_feed_forward_length") +
              (groups_ok ? std::string()
                         : ", and " + a + "expert_group_count dividing expert_count with " + a +
                               "expert_group_used_count groups holding at least expert_used_count experts"));
}

}  // namespace kvad
