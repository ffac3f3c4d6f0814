#include "tensor/op_set.h"

#include "tensor/backend.h"

namespace kvad {

const char* op_name(Op op) {
  switch (op) {
    case Op::Convert: return "convert";
    case Op::Cont: return "cont";
    case Op::Matmul: return "matmul";
    case Op::MatmulBatched: return "matmul_batched";
    case Op::Add: return "add";
    case Op::Mul: return "mul";
    case Op::Scale: return "scale";
    case Op::RmsNorm: return "rms_norm";
    case Op::LayerNorm: return "layer_norm";
    case Op::Rope: return "rope";
    case Op::GetRows: return "get_rows";
    case Op::Softmax: return "softmax";
    case Op::Silu: return "silu";
    case Op::Gelu: return "gelu";
    case Op::GeluErf: return "gelu_erf";
    case Op::Sigmoid: return "sigmoid";
    case Op::Softplus: return "softplus";
    case Op::Tanh: return "tanh";
    case Op::Sin: return "sin";
    case Op::Cos: return "cos";
    case Op::QuickGelu: return "quick_gelu";
    case Op::Swiglu: return "swiglu";
    case Op::Geglu: return "geglu";
    case Op::GegluErf: return "geglu_erf";
    case Op::SwigluOai: return "swiglu_oai";
    case Op::Concat: return "concat";
    case Op::Slice: return "slice";
    case Op::KvStore: return "kv_store";
    case Op::Attention: return "attention";
    case Op::AttentionBidirectional: return "attention_bidirectional";
    case Op::AttentionSinks: return "attention_sinks";
    case Op::AttentionSoftcap: return "attention_softcap";
    case Op::AttentionLatent: return "attention_latent";
    case Op::AttentionSeq: return "attention_seq";
    case Op::GroupNorm: return "group_norm";
    case Op::UpsampleNearest2d: return "upsample_nearest2d";
    case Op::Pad: return "pad";
    case Op::ConcatDim: return "concat_dim";
    case Op::Conv2d: return "conv2d";
    case Op::Sdpa: return "sdpa";
    case Op::MoeRoute: return "moe_route";
    case Op::MatmulId: return "matmul_id";
    case Op::MoeSum: return "moe_sum";
    case Op::SsmConv: return "ssm_conv";
    case Op::GatedDeltaRule: return "gated_delta_rule";
  }
  return "?";
}

std::string OpSet::str() const {
  std::string s;
  for (int i = 0; i < kOpCount; ++i)
    if (has(static_cast<Op>(i))) s += (s.empty() ? "" : ", ") + std::string(op_name(static_cast<Op>(i)));
  return s;
}

namespace {

// Whether the row fills the entry that serves `op`.
bool has_entry(const BackendOps& r, Op op) {
  switch (op) {
    case Op::Convert: return r.convert;
    case Op::Cont: return r.cont;
    case Op::Matmul: return r.matmul;
    case Op::MatmulBatched: return r.matmul_batched;
    case Op::Add:
    case Op::Mul: return r.binary;
    case Op::Scale: return r.scale;
    case Op::RmsNorm: return r.rms_norm;
    case Op::LayerNorm: return r.layer_norm;
    case Op::Rope: return r.rope;
    case Op::GetRows: return r.get_rows;
    case Op::Softmax: return r.softmax;
    case Op::Silu:
    case Op::Gelu:
    case Op::GeluErf:
    case Op::Sigmoid:
    case Op::Softplus:
    case Op::Tanh:
    case Op::Sin:
    case Op::Cos:
    case Op::QuickGelu: return r.unary;
    case Op::Swiglu:
    case Op::Geglu:
    case Op::GegluErf: return r.glu;
    case Op::SwigluOai: return r.swiglu_oai;
    case Op::Concat: return r.concat;
    case Op::Slice: return r.slice;
    case Op::KvStore: return r.kv_store;
    case Op::Attention:
    case Op::AttentionBidirectional:
    case Op::AttentionSinks:
    case Op::AttentionSoftcap: return r.attention;
    case Op::AttentionLatent: return r.attention_latent;
    case Op::AttentionSeq: return r.attention_seq;
    case Op::GroupNorm: return r.group_norm;
    case Op::UpsampleNearest2d: return r.upsample_nearest2d;
    case Op::Pad: return r.pad;
    case Op::ConcatDim: return r.concat_dim;
    case Op::Conv2d: return r.conv2d;
    case Op::Sdpa: return r.sdpa;
    case Op::MoeRoute: return r.moe_route;
    case Op::MatmulId: return r.matmul_id;
    case Op::MoeSum: return r.moe_sum;
    case Op::SsmConv: return r.ssm_conv;
    case Op::GatedDeltaRule: return r.gated_delta_rule;
  }
  return false;
}

}  // namespace

OpSet row_ops(const BackendOps& row) {
  OpSet s;
  for (int i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    if (has_entry(row, op) && !row.refuses.has(op)) s.add(op);
  }
  return s;
}

}  // namespace kvad
