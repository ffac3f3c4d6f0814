// The names of the op table's ops (tensor/backend.h BackendOps), as sets:
// what an architecture runs (model/registry.h ArchEntry::ops) and what a
// backend's row provides (row_ops). The registry answers "which devices run
// this architecture" from the two, so that the fact is stated once: in the
// row itself (its entries, and the variants it refuses).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

namespace kvad {

struct BackendOps;

/// One op of the table, named as ops.h names it. Where one entry serves
/// several ops (unary: silu, gelu, ...; glu: swiglu, geglu) each is its own
/// Op, and so are the variants of attention a row may refuse although it has
/// the entry (BackendOps::refuses): bidirectional, sinks, soft-capping.
enum class Op : uint8_t {
  Convert,                 ///< convert (entry convert)
  Cont,                    ///< cont: a strided view copied contiguous
  Matmul,                  ///< matmul, matmul_multi (entry matmul)
  MatmulBatched,           ///< matmul_batched
  Add,                     ///< add (entry binary)
  Mul,                     ///< mul (entry binary)
  Scale,                   ///< scale
  RmsNorm,                 ///< rms_norm
  LayerNorm,               ///< layer_norm
  Rope,                    ///< rope
  GetRows,                 ///< get_rows
  Softmax,                 ///< softmax
  Silu,                    ///< silu (entry unary)
  Gelu,                    ///< gelu, tanh approximation (entry unary)
  GeluErf,                 ///< gelu_erf (entry unary)
  Sigmoid,                 ///< sigmoid (entry unary)
  Softplus,                ///< softplus (entry unary)
  Tanh,                    ///< tanh (entry unary)
  Sin,                     ///< sin (entry unary)
  Cos,                     ///< cos (entry unary)
  QuickGelu,               ///< quick_gelu (entry unary)
  Swiglu,                  ///< swiglu (entry glu)
  Geglu,                   ///< geglu (entry glu)
  GegluErf,                ///< geglu_erf, geglu_split (entry glu)
  SwigluOai,               ///< swiglu_oai
  Concat,                  ///< concat
  Slice,                   ///< slice
  KvStore,                 ///< kv_store
  Attention,               ///< attention, causal, without sinks or soft-capping
  AttentionBidirectional,  ///< attention with causal = false (entry attention)
  AttentionSinks,          ///< attention with sinks (entry attention)
  AttentionSoftcap,        ///< attention with softcap > 0 (entry attention)
  AttentionLatent,         ///< attention_latent
  AttentionSeq,            ///< attention_seq
  GroupNorm,               ///< group_norm
  UpsampleNearest2d,       ///< upsample_nearest2d
  Pad,                     ///< pad
  ConcatDim,               ///< concat along a chosen dimension (entry concat_dim)
  Conv2d,                  ///< conv2d
  Sdpa,                    ///< sdpa: attention without a mask or cache
  MoeRoute,                ///< moe_route
  MatmulId,                ///< matmul_id
  MoeSum,                  ///< moe_sum
  SsmConv,                 ///< ssm_conv
  GatedDeltaRule,          ///< gated_delta_rule
};
inline constexpr int kOpCount = static_cast<int>(Op::GatedDeltaRule) + 1;
static_assert(kOpCount <= 64, "OpSet holds 64 ops");

/// "matmul", "attention_sinks", ...: ops.h's name of the op (attention's
/// variants: "attention_bidirectional", "attention_sinks",
/// "attention_softcap").
const char* op_name(Op op);

/// A set of ops: a bit per Op, built like the data it is
/// (OpSet{Op::Matmul, Op::Add}).
class OpSet {
 public:
  constexpr OpSet() = default;
  constexpr OpSet(std::initializer_list<Op> ops) {
    for (Op op : ops) bits_ |= bit(op);
  }
  constexpr bool has(Op op) const { return (bits_ & bit(op)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr OpSet operator|(OpSet o) const { return from_bits(bits_ | o.bits_); }
  /// The ops of this set that `o` lacks.
  constexpr OpSet operator-(OpSet o) const { return from_bits(bits_ & ~o.bits_); }
  constexpr bool contains(OpSet o) const { return (o - *this).empty(); }
  constexpr bool operator==(const OpSet&) const = default;
  OpSet& add(Op op) {
    bits_ |= bit(op);
    return *this;
  }
  /// "matmul, rope, ..." in Op order; "" for the empty set.
  std::string str() const;

 private:
  static constexpr uint64_t bit(Op op) { return uint64_t{1} << static_cast<int>(op); }
  static constexpr OpSet from_bits(uint64_t b) {
    OpSet s;
    s.bits_ = b;
    return s;
  }
  uint64_t bits_ = 0;
};

/// Every op a row provides: those whose entry it fills, less the variants
/// it lists in BackendOps::refuses.
OpSet row_ops(const BackendOps& row);

}  // namespace kvad
