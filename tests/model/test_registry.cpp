// The registry's answer of what runs where (model/registry.h) is computed
// from the op table (tensor/op_set.h row_ops): each architecture's op set
// equals the ops a forward pass of its tiny checkpoints calls, and a row
// that gains or loses an entry, or refuses a variant, changes the answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "engine/session.h"
#include "hf_checkpoint_util.h"
#include "model/hf.h"
#include "model/registry.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace {

using namespace kvad::hf_test;
using kvad::BackendOps;
using kvad::DeviceType;
using kvad::Op;
using kvad::OpSet;
using kvad::Tensor;

// ---- a row that records which ops run -------------------------------------

OpSet g_used;
const BackendOps* g_sim = nullptr;  // the sim row the recording row forwards to

// The sim row's entries, each noting the op (and variant) it runs.
BackendOps recording_row() {
  BackendOps r = *g_sim;
  r.convert = [](const Tensor& s, const Tensor& d) {
    g_used.add(Op::Convert);
    g_sim->convert(s, d);
  };
  r.cont = [](const Tensor& x, const Tensor& o) {
    g_used.add(Op::Cont);
    g_sim->cont(x, o);
  };
  r.matmul_batched = [](const Tensor& x, const Tensor& w, const Tensor& o) {
    g_used.add(Op::MatmulBatched);
    g_sim->matmul_batched(x, w, o);
  };
  r.matmul = [](const Tensor& x, const Tensor* const* w, const Tensor* o, int n) {
    g_used.add(Op::Matmul);
    g_sim->matmul(x, w, o, n);
  };
  r.binary = [](kvad::Binary op, const Tensor& a, const Tensor& b, const Tensor& o) {
    g_used.add(op == kvad::Binary::Add ? Op::Add : Op::Mul);
    g_sim->binary(op, a, b, o);
  };
  r.scale = [](const Tensor& x, float s, const Tensor& o) {
    g_used.add(Op::Scale);
    g_sim->scale(x, s, o);
  };
  r.rms_norm = [](const Tensor& x, const Tensor* w, float eps, bool one_plus, const Tensor& o) {
    g_used.add(Op::RmsNorm);
    g_sim->rms_norm(x, w, eps, one_plus, o);
  };
  r.layer_norm = [](const Tensor& x, const Tensor* w, const Tensor* b, float eps, const Tensor& o) {
    g_used.add(Op::LayerNorm);
    g_sim->layer_norm(x, w, b, eps, o);
  };
  r.rope = [](const Tensor& x, const Tensor& pos, const kvad::RopeParams& p, const Tensor& o) {
    g_used.add(Op::Rope);
    g_sim->rope(x, pos, p, o);
  };
  r.get_rows = [](const Tensor& t, const Tensor& ids, const Tensor& o) {
    g_used.add(Op::GetRows);
    g_sim->get_rows(t, ids, o);
  };
  r.softmax = [](const Tensor& x, const Tensor& o) {
    g_used.add(Op::Softmax);
    g_sim->softmax(x, o);
  };
  r.unary = [](kvad::Unary op, const Tensor& x, const Tensor& o) {
    switch (op) {
      case kvad::Unary::SiLU: g_used.add(Op::Silu); break;
      case kvad::Unary::GELU_tanh: g_used.add(Op::Gelu); break;
      case kvad::Unary::GELU_erf: g_used.add(Op::GeluErf); break;
      case kvad::Unary::Sigmoid: g_used.add(Op::Sigmoid); break;
      case kvad::Unary::Softplus: g_used.add(Op::Softplus); break;
      case kvad::Unary::Tanh: g_used.add(Op::Tanh); break;
      case kvad::Unary::Sin: g_used.add(Op::Sin); break;
      case kvad::Unary::Cos: g_used.add(Op::Cos); break;
      case kvad::Unary::QuickGELU: g_used.add(Op::QuickGelu); break;
    }
    g_sim->unary(op, x, o);
  };
  r.glu = [](kvad::Unary op, const Tensor& g, const Tensor& u, const Tensor& o) {
    g_used.add(op == kvad::Unary::SiLU ? Op::Swiglu : op == kvad::Unary::GELU_erf ? Op::GegluErf : Op::Geglu);
    g_sim->glu(op, g, u, o);
  };
  r.concat = [](const Tensor& a, const Tensor& b, const Tensor& o) {
    g_used.add(Op::Concat);
    g_sim->concat(a, b, o);
  };
  r.slice = [](const Tensor& x, int64_t off, const Tensor& o) {
    g_used.add(Op::Slice);
    g_sim->slice(x, off, o);
  };
  r.swiglu_oai = [](const Tensor& g, const Tensor& u, float alpha, float limit, const Tensor& o) {
    g_used.add(Op::SwigluOai);
    g_sim->swiglu_oai(g, u, alpha, limit, o);
  };
  r.kv_store = [](const Tensor& c, const Tensor& x, const Tensor& seq, const Tensor& pos, int64_t slots) {
    g_used.add(Op::KvStore);
    g_sim->kv_store(c, x, seq, pos, slots);
  };
  r.attention = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos,
                   const kvad::AttentionOpParams& p, const Tensor& o) {
    g_used.add(p.causal ? Op::Attention : Op::AttentionBidirectional);
    if (p.sinks) g_used.add(Op::AttentionSinks);
    if (p.softcap > 0) g_used.add(Op::AttentionSoftcap);
    g_sim->attention(q, k, v, seq, pos, p, o);
  };
  r.attention_latent = [](const Tensor& q, const Tensor& c, const Tensor& seq, const Tensor& pos,
                          const kvad::AttentionOpParams& p, const Tensor& o) {
    g_used.add(Op::AttentionLatent);
    g_sim->attention_latent(q, c, seq, pos, p, o);
  };
  r.attention_seq = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, float scale,
                       const Tensor& o) {
    g_used.add(Op::AttentionSeq);
    g_sim->attention_seq(q, k, v, pos, scale, o);
  };
  r.moe_route = [](const Tensor& l, const kvad::MoeRouteParams& p, const Tensor& ids, const Tensor& w) {
    g_used.add(Op::MoeRoute);
    g_sim->moe_route(l, p, ids, w);
  };
  r.matmul_id = [](const Tensor& x, const Tensor& w, const Tensor& ids, const Tensor& o) {
    g_used.add(Op::MatmulId);
    g_sim->matmul_id(x, w, ids, o);
  };
  r.moe_sum = [](const Tensor& y, const Tensor& w, const Tensor& o) {
    g_used.add(Op::MoeSum);
    g_sim->moe_sum(y, w, o);
  };
  r.ssm_conv = [](const Tensor& x, const Tensor& w, const Tensor& s, const Tensor& seq, const Tensor& pos,
                  const Tensor& o) {
    g_used.add(Op::SsmConv);
    g_sim->ssm_conv(x, w, s, seq, pos, o);
  };
  r.gated_delta_rule = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                          const Tensor& s, const Tensor& seq, const Tensor& pos, const kvad::DeltaRuleParams& p,
                          const Tensor& o) {
    g_used.add(Op::GatedDeltaRule);
    g_sim->gated_delta_rule(q, k, v, g, beta, s, seq, pos, p, o);
  };
  return r;
}

// Puts `row` in place of device type t's row for the scope, then the
// original back.
class RowScope {
 public:
  RowScope(DeviceType t, const BackendOps* row) : t_(t), prev_(kvad::find_backend(t)) { kvad::register_backend(t, row); }
  ~RowScope() { kvad::register_backend(t_, prev_); }
  RowScope(const RowScope&) = delete;
  RowScope& operator=(const RowScope&) = delete;

 private:
  DeviceType t_;
  const BackendOps* prev_;
};

// The ops a forward pass of `src` calls on the sim device: a prefill of 10
// tokens, then two decode steps (the paths differ: deepseek2's prefill is
// expanded, its decode absorbed). Loading is not counted.
OpSet ops_run(std::shared_ptr<const kvad::TensorSource> src) {
  kvad::DeviceOptions o;
  o.device = "sim";
  std::shared_ptr<kvad::Model> m = kvad::load_model(std::move(src), o);
  g_used = {};
  const int32_t n_vocab = static_cast<int32_t>(m->hparams().n_vocab);
  if (kvad::model_kind(*m) == kvad::ModelKind::Embedding) {
    kvad::ThreadPool pool(1);
    std::unique_ptr<kvad::Cache> cache = m->new_cache(16, 1, 16);
    std::vector<int32_t> tok, pos, seq(10, 0);
    for (int32_t i = 0; i < 10; ++i) {
      tok.push_back((7 * i + 1) % n_vocab);
      pos.push_back(i);
    }
    std::vector<float> hidden(10 * static_cast<size_t>(m->hparams().n_embd));
    kvad::BatchView b;
    b.token = tok.data();
    b.pos = pos.data();
    b.seq = seq.data();
    b.n = 10;
    m->hidden(pool, *cache, b, hidden.data());
    return g_used;
  }
  kvad::Session s(m, 64, 1, 1);
  kvad::Batch b;
  for (int32_t i = 0; i < 10; ++i) b.add((7 * i + 1) % n_vocab, i, 0, i == 9);
  s.forward(b);
  for (int32_t i = 10; i < 12; ++i) {
    kvad::Batch d;
    d.add((7 * i + 1) % n_vocab, i, 0, true);
    s.forward(d);
  }
  return g_used;
}

std::filesystem::path minilm_dir() {
  const char* h = std::getenv("KVAD_HOME");
  const std::string home =
      h && *h ? h : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/kvad";
  return std::filesystem::path(home) / "models" / "sentence-transformers" / "all-MiniLM-L6-v2";
}

// Every architecture's declared ops are the ops its checkpoints run, no
// more (the registry would refuse a device for nothing) and no fewer (it
// would send a model to a row that cannot run it). bert needs the store's
// all-MiniLM-L6-v2 (scripts/setup); without it bert alone is not checked.
TEST(Registry, EachArchitecturesOpsAreTheOpsItsForwardPassRuns) {
  g_sim = kvad::find_backend(DeviceType::Sim);
  ASSERT_NE(g_sim, nullptr);
  const BackendOps rec = recording_row();
  RowScope scope(DeviceType::Sim, &rec);
  std::map<std::string, int> checked;
  auto check = [&](const std::string& label, std::shared_ptr<const kvad::TensorSource> src) {
    SCOPED_TRACE(label);
    const std::string arch = src->get_string("general.architecture", "");
    const kvad::ArchEntry* a = kvad::find_architecture(arch);
    ASSERT_NE(a, nullptr) << arch;
    const OpSet declared = a->checkpoint_ops ? a->ops | a->checkpoint_ops(*src) : a->ops;
    const OpSet ran = ops_run(src);
    std::printf("%s (%s) runs: %s\n", label.c_str(), arch.c_str(), ran.str().c_str());
    EXPECT_EQ(ran - declared, OpSet{}) << arch << " runs ops the registry does not list: " << (ran - declared).str();
    EXPECT_EQ(declared - ran, OpSet{}) << arch << " is listed with ops it does not run: " << (declared - ran).str();
    ++checked[arch];
  };
  for (const char* name : {"llama", "llama3", "mistral", "mixtral", "qwen2", "qwen2_swa", "qwen3", "phi3", "qwen3moe",
                           "qwen2moe", "qwen2moe_dense", "gemma3", "gemma2", "gpt2", "gpt_oss", "deepseek_v3",
                           "deepseek_v2_lite", "qwen3next", "qwen3next_dense", "qwen35", "qwen35moe"})
    check(name, kvad::open_hf_checkpoint((kDir / name).string()));
  check("gpt_oss_mxfp4 (llama.cpp GGUF)", llama_cpp_gguf("gpt_oss_mxfp4"));
  if (std::filesystem::exists(minilm_dir() / "config.json"))
    check("all-MiniLM-L6-v2", kvad::open_hf_checkpoint(minilm_dir().string()));
  for (const kvad::ArchEntry& a : kvad::architectures()) {
    if (a.name != "bert") EXPECT_GT(checked[a.name], 0) << a.name << " has no checkpoint here";
  }
}

// ---- the answer follows the rows ------------------------------------------

bool has(const std::vector<std::string>& v, const char* x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The cpu and sim rows run every architecture; a sim row without one MoE
// entry loses exactly the architectures that route experts, for the reason
// named, and so does a checkpoint whose layers have experts (llama's Mixtral)
// though its architecture's dense checkpoints still run there.
TEST(Registry, ARowWithoutAnEntryLosesTheArchitecturesThatUseIt) {
  for (const kvad::ArchEntry& a : kvad::architectures()) {
    EXPECT_TRUE(has(kvad::arch_devices(a), "cpu")) << a.name;
    EXPECT_TRUE(has(kvad::arch_devices(a), "sim")) << a.name;
  }
  BackendOps no_route = *kvad::find_backend(DeviceType::Sim);
  no_route.moe_route = nullptr;
  {
    RowScope scope(DeviceType::Sim, &no_route);
    const kvad::ArchEntry* moe = kvad::find_architecture("qwen3moe");
    const kvad::ArchEntry* llama = kvad::find_architecture("llama");
    ASSERT_TRUE(moe && llama);
    EXPECT_EQ(kvad::missing_ops(*moe, DeviceType::Sim), OpSet{Op::MoeRoute});
    EXPECT_FALSE(has(kvad::arch_devices(*moe), "sim"));
    EXPECT_TRUE(has(kvad::arch_devices(*moe), "cpu"));
    EXPECT_TRUE(has(kvad::arch_devices(*llama), "sim"));
    const std::string sim_runs = kvad::supported_architectures("sim");
    EXPECT_EQ(sim_runs.find("qwen3moe"), std::string::npos) << sim_runs;
    EXPECT_NE(sim_runs.find("llama"), std::string::npos) << sim_runs;
    auto mixtral = kvad::open_hf_checkpoint((kDir / "mixtral").string());
    EXPECT_FALSE(has(kvad::arch_devices(*llama, mixtral.get()), "sim"));
    kvad::DeviceOptions o;
    o.device = "sim";
    try {
      (void)kvad::load_model(mixtral, o);
      ADD_FAILURE() << "mixtral loaded on a row without moe_route";
    } catch (const kvad::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'llama' is not supported on sim, whose row has no moe_route"), std::string::npos) << what;
      EXPECT_NE(what.find("llama runs on: cpu"), std::string::npos) << what;
    }
    EXPECT_NO_THROW((void)kvad::load_model(kvad::open_hf_checkpoint((kDir / "llama").string()), o));
  }
  // The row back: the answer is back.
  EXPECT_TRUE(has(kvad::arch_devices(*kvad::find_architecture("qwen3moe")), "sim"));
}

// A row that has the attention entry but refuses one of its variants
// (BackendOps::refuses, as the CUDA row refuses sinks) loses the
// architectures that need it, and the op layer refuses the call by name.
TEST(Registry, ARefusedVariantIsAMissingOp) {
  BackendOps no_sinks = *kvad::find_backend(DeviceType::Sim);
  no_sinks.refuses = {Op::AttentionSinks};
  RowScope scope(DeviceType::Sim, &no_sinks);
  const kvad::ArchEntry* oss = kvad::find_architecture("gpt-oss");
  ASSERT_NE(oss, nullptr);
  EXPECT_EQ(kvad::missing_ops(*oss, DeviceType::Sim), OpSet{Op::AttentionSinks});
  EXPECT_FALSE(has(kvad::arch_devices(*oss), "sim"));
  EXPECT_TRUE(has(kvad::arch_devices(*kvad::find_architecture("gemma2")), "sim"));
  kvad::DeviceOptions o;
  o.device = "sim";
  try {
    (void)kvad::load_model(kvad::open_hf_checkpoint((kDir / "gpt_oss").string()), o);
    ADD_FAILURE() << "gpt-oss loaded on a row that refuses sinks";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("whose row has no attention_sinks"), std::string::npos) << e.what();
  }
  // The op itself, called directly.
  const kvad::Device sim = kvad::Device::sim();
  const float zero[64] = {};
  const Tensor q = kvad::ops::from_host(zero, kvad::DType::F32, {4, 2, 1, 1}, sim);
  const Tensor kv = kvad::ops::from_host(zero, kvad::DType::F32, {8, 4, 1, 1}, sim);
  const int32_t zero_id = 0;
  const Tensor id = kvad::ops::from_host(&zero_id, kvad::DType::I32, {1, 1, 1, 1}, sim);
  kvad::AttentionOpParams p;
  p.scale = 1;
  p.slots = 4;
  p.sinks = kvad::ops::from_host(zero, kvad::DType::F32, {2, 1, 1, 1}, sim);
  try {
    (void)kvad::ops::attention(q, kv, kv, id, id, p);
    ADD_FAILURE() << "attention with sinks ran on a row that refuses them";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention: attention_sinks is not implemented on sim"), std::string::npos)
        << e.what();
  }
  p.sinks = {};
  EXPECT_NO_THROW((void)kvad::ops::attention(q, kv, kv, id, id, p));
}

// A device type gains architectures as its row gains entries: the CPU's
// entries in the CUDA slot make every architecture a CUDA one; the CUDA row
// of this build (when it has one) runs the dense decoders and not what its
// empty entries and refusals rule out.
TEST(Registry, TheCudaAnswerIsTheCudaRows) {
  const BackendOps* cuda = kvad::find_backend(DeviceType::CUDA);
  if (cuda) {
    for (const char* arch : {"llama", "qwen2", "qwen3", "gemma3", "phi3", "gpt2"})
      EXPECT_TRUE(has(kvad::arch_devices(*kvad::find_architecture(arch)), "cuda")) << arch;
    for (const char* arch : {"qwen3moe", "qwen2moe", "deepseek2", "qwen3next", "qwen35", "qwen35moe", "gpt-oss", "bert",
                             "gemma2"})
      EXPECT_FALSE(has(kvad::arch_devices(*kvad::find_architecture(arch)), "cuda")) << arch;
    EXPECT_TRUE(kvad::missing_ops(*kvad::find_architecture("gpt-oss"), DeviceType::CUDA).has(Op::AttentionSinks));
    EXPECT_TRUE(kvad::missing_ops(*kvad::find_architecture("bert"), DeviceType::CUDA).has(Op::AttentionBidirectional));
    EXPECT_EQ(kvad::missing_ops(*kvad::find_architecture("gemma2"), DeviceType::CUDA), OpSet{Op::AttentionSoftcap});
  } else {
    EXPECT_EQ(kvad::supported_architectures("cuda"), "");
  }
  BackendOps all = *kvad::find_backend(DeviceType::CPU);
  all.name = "cuda";
  {
    RowScope scope(DeviceType::CUDA, &all);
    for (const kvad::ArchEntry& a : kvad::architectures())
      EXPECT_TRUE(has(kvad::arch_devices(a), "cuda")) << a.name;
  }
  EXPECT_EQ(kvad::find_backend(DeviceType::CUDA), cuda);
}

}  // namespace
