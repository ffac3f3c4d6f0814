// make_random_gguf: writes a random-weight llama-architecture GGUF of a real
// model's shape, for GPU speed and GPU-vs-CPU checks on a machine that has
// neither the real files nor Python packages (scripts/device-check). C++
// twin of tools/make_random_gguf.py (llama shapes), which needs numpy, gguf and the SmolLM2
// tokenizer; this one writes its own tiny SentencePiece-style vocabulary
// (<unk>, <s>, </s>, 256 byte tokens, then "t<i>" tokens) and bf16 weights.
//
// Usage: make_random_gguf SHAPE OUT.gguf [--seed N]
// Shapes (tied embeddings, head_dim 64):
//   qwen2.5-0.5b  llama,  n_embd 896,  24 layers, 14 heads, 2 kv, n_ff 4864, vocab 151936, rope base 1e6
//   llama3.2-1b   llama,  n_embd 2048, 16 layers, 32 heads, 8 kv, n_ff 8192, vocab 128256, rope base 5e5
//   tiny          llama,  n_embd 128,   2 layers,  4 heads, 2 kv, n_ff 256,  vocab 512 (tests)
//   tiny-gemma3   gemma3, n_embd 128,   6 layers,  4 heads, 1 kv, n_ff 256,  vocab 512, sliding
//                 window 8 (5 local layers, 1 global), QK norms and post norms
// Weights: uniform with std 1/sqrt(n_in) (embeddings std 1), norms 1.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "tensor/half.h"

namespace {

struct Shape {
  const char* name;
  const char* arch;
  int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab;
  double rope_base;
  int64_t window;  // gemma3 only
};
constexpr Shape kShapes[] = {
    {"qwen2.5-0.5b", "llama", 896, 24, 14, 2, 4864, 151936, 1e6, 0},
    {"llama3.2-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 5e5, 0},
    {"tiny", "llama", 128, 2, 4, 2, 256, 512, 1e4, 0},
    {"tiny-gemma3", "gemma3", 128, 6, 4, 1, 256, 512, 1e6, 8},
};

struct Rng {  // splitmix64
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; }
};

struct TensorPlan {
  std::string name;
  std::vector<int64_t> ne;
  bool norm;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace kvad;
  if (argc < 3) {
    std::fprintf(stderr, "usage: make_random_gguf SHAPE OUT.gguf [--seed N]\nshapes:");
    for (const Shape& s : kShapes) std::fprintf(stderr, " %s", s.name);
    std::fprintf(stderr, "\n");
    return 2;
  }
  const Shape* sh = nullptr;
  for (const Shape& s : kShapes)
    if (std::string(argv[1]) == s.name) sh = &s;
  if (!sh) {
    std::fprintf(stderr, "make_random_gguf: unknown shape %s\n", argv[1]);
    return 2;
  }
  uint64_t seed = 1;
  if (argc >= 5 && std::string(argv[3]) == "--seed") seed = std::stoull(argv[4]);
  const std::string out = argv[2];
  try {
    const int64_t E = sh->n_embd, D = 64, qd = sh->n_head * D, kv = sh->n_head_kv * D, F = sh->n_ff, V = sh->n_vocab;
    const std::string a = std::string(sh->arch) + ".";
    const bool gemma = std::string(sh->arch) == "gemma3";
    gguf::Writer w;
    using VT = gguf::ValueType;
    w.add(gguf::make_string("general.architecture", sh->arch));
    w.add(gguf::make_string("general.name", std::string("random ") + sh->name + " shape"));
    w.add(gguf::make_uint(a + "context_length", VT::UINT32, 4096));
    w.add(gguf::make_uint(a + "embedding_length", VT::UINT32, E));
    w.add(gguf::make_uint(a + "block_count", VT::UINT32, sh->n_layer));
    w.add(gguf::make_uint(a + "feed_forward_length", VT::UINT32, F));
    w.add(gguf::make_uint(a + "attention.head_count", VT::UINT32, sh->n_head));
    w.add(gguf::make_uint(a + "attention.head_count_kv", VT::UINT32, sh->n_head_kv));
    w.add(gguf::make_uint(a + "attention.key_length", VT::UINT32, D));
    w.add(gguf::make_uint(a + "attention.value_length", VT::UINT32, D));
    w.add(gguf::make_uint(a + "rope.dimension_count", VT::UINT32, D));
    w.add(gguf::make_float(a + "rope.freq_base", VT::FLOAT32, sh->rope_base));
    w.add(gguf::make_float(a + "attention.layer_norm_rms_epsilon", VT::FLOAT32, 1e-6));
    if (gemma) w.add(gguf::make_uint(a + "attention.sliding_window", VT::UINT32, sh->window));
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int64_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      tokens.push_back(buf);
      types.push_back(6);
    }
    while (static_cast<int64_t>(tokens.size()) < V) {
      tokens.push_back(std::string("t").append(std::to_string(tokens.size())));
      types.push_back(1);
    }
    w.add(gguf::make_string("tokenizer.ggml.model", "llama"));
    w.add(gguf::make_string_array("tokenizer.ggml.tokens", tokens));
    w.add(gguf::make_int_array("tokenizer.ggml.token_type", VT::INT32, types));
    w.add(gguf::make_float_array("tokenizer.ggml.scores", VT::FLOAT32, std::vector<double>(tokens.size(), 0.0)));
    w.add(gguf::make_uint("tokenizer.ggml.unknown_token_id", VT::UINT32, 0));
    w.add(gguf::make_uint("tokenizer.ggml.bos_token_id", VT::UINT32, 1));
    w.add(gguf::make_uint("tokenizer.ggml.eos_token_id", VT::UINT32, 2));

    std::vector<TensorPlan> plan = {{"token_embd.weight", {E, V}, false}, {"output_norm.weight", {E}, true}};
    for (int64_t il = 0; il < sh->n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      plan.push_back({p + "attn_norm.weight", {E}, true});
      plan.push_back({p + "attn_q.weight", {E, qd}, false});
      plan.push_back({p + "attn_k.weight", {E, kv}, false});
      plan.push_back({p + "attn_v.weight", {E, kv}, false});
      plan.push_back({p + "attn_output.weight", {qd, E}, false});
      plan.push_back({p + "ffn_norm.weight", {E}, true});
      plan.push_back({p + "ffn_gate.weight", {E, F}, false});
      plan.push_back({p + "ffn_up.weight", {E, F}, false});
      plan.push_back({p + "ffn_down.weight", {F, E}, false});
      if (gemma) {
        plan.push_back({p + "attn_q_norm.weight", {D}, true});
        plan.push_back({p + "attn_k_norm.weight", {D}, true});
        plan.push_back({p + "post_attention_norm.weight", {E}, true});
        plan.push_back({p + "post_ffw_norm.weight", {E}, true});
      }
    }
    for (const TensorPlan& t : plan) w.add_tensor_deferred(t.name, t.norm ? DType::F32 : DType::BF16, t.ne);
    const std::string tmp = out + ".tmp";
    w.write_file(tmp, [&](size_t i, size_t n_bytes, const gguf::Writer::Sink& sink) {
      const TensorPlan& t = plan[i];
      if (t.norm) {
        std::vector<float> ones(t.ne[0], 1.0f);
        sink(ones.data(), ones.size() * 4);
        return;
      }
      Rng rng{seed * 1000003u + i};
      const float a = std::sqrt(3.0f) * (i == 0 ? 1.0f : 1.0f / std::sqrt(static_cast<float>(t.ne[0])));
      std::vector<uint16_t> row(t.ne[0]);
      for (int64_t r = 0; r < t.ne[1]; ++r) {
        for (auto& v : row) v = f32_to_bf16(a * rng.uniform());
        sink(row.data(), row.size() * 2);
      }
      (void)n_bytes;
    });
    if (std::rename(tmp.c_str(), out.c_str()) != 0) throw std::runtime_error("rename " + tmp + " failed");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_random_gguf: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
