#include "model/hparams.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/error.h"
#include "io/tensor_source.h"

namespace kvad {

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

}  // namespace kvad
