// A TensorSource seen through a name table (DESIGN.md seam 9): a checkpoint
// whose tensors and settings use other names (an HF safetensors checkpoint:
// `model.layers.0.self_attn.q_proj.weight`, `hidden_size`) presented under
// kvad's one naming, GGUF's (`blk.0.attn_q.weight`, `llama.embedding_length`),
// so that architectures load it exactly as they load a GGUF.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "io/tensor_source.h"

namespace kvad {

/// How a tensor's bytes are presented.
enum class TensorTransform {
  None,          ///< as stored, zero-copy
  ToF32,         ///< converted to f32 (norm weights stored in bf16/f16)
  ToF32PlusOne,  ///< converted to f32, plus 1 (Gemma's RMSNorm x̂·(1 + w), stored as w + 1 in GGUF)
  ToF32NegExp,   ///< converted to f32, then −e^w (Qwen3-Next's A_log, stored as ssm_a = −exp(A_log) in GGUF)
  /// A 2-D matrix with its dims swapped, copied once into memory the view
  /// owns (HF GPT-2's Conv1D stores [n_in, n_out]; GGUF wants n_out rows
  /// of n_in); a 3-D tensor has each of its matrices swapped (gpt-oss's
  /// experts [n_expert, n_in, n_out]). f32, f16 and bf16 only.
  Transpose,
  /// OpenAI's MXFP4 (gpt-oss checkpoints): `base` holds the packed values
  /// [..., rows, n/32, 16] (u8; value 2k in the low nibble of byte k, 2k+1
  /// in the high, as transformers' convert_moe_packed_tensors reads them)
  /// and TensorRename::scales their e8m0 scales [..., rows, n/32] (u8); the
  /// view is GGUF's MXFP4 [..., rows, n] (ggml's block_mxfp4: the scale, then
  /// value j in the low nibble of byte j and j + 16 in the high), copied once
  /// into memory the view owns. lanes > 1 selects rows rather than columns
  /// (gpt-oss's gate_up_proj_blocks: gate rows even, up rows odd).
  Mxfp4,
  /// A 2-D float8_e4m3fn matrix (safetensors F8_E4M3) with block scales:
  /// w[r, c] = fp8(q[r, c]) · scale[r / block_rows, c / block_cols], scale
  /// the tensor TensorRename::scale names ([⌈rows / block_rows⌉, ⌈cols /
  /// block_cols⌉] f32 or bf16; DeepSeek-V3's `weight_scale_inv`, 128×128
  /// blocks), dequantized once into f32 memory the view owns. The scale
  /// tensor counts as read.
  Fp8BlockScaled,
};

/// One tensor of the view: GGUF name → the base source's tensor.
struct TensorRename {
  std::string name;      ///< kvad's (GGUF) name
  std::string base;      ///< the tensor's name in the base source
  TensorTransform transform = TensorTransform::None;
  /// >= 0: `base` is slice `part` of `name`, a stack of equally shaped
  /// tensors along a new outermost dim (HF's per-expert matrices
  /// model.layers.N.mlp.experts.E.gate_proj → GGUF's 3-D ffn_gate_exps).
  /// The parts must be 0..n-1; the stack is copied once into memory the view
  /// owns (the parts' pages of the base's mapping are then released, so
  /// they are not resident twice). Only with TensorTransform::None or
  /// Fp8BlockScaled (each part dequantized first).
  int64_t part = -1;
  /// lanes > 1: the base's innermost dim interleaves `lanes` tensors, and
  /// this rule takes lane `lane`: columns lane, lane + lanes, ... (gpt-oss's
  /// gate_up_proj and its bias: gate in the even columns, up in the odd, as
  /// transformers' GptOssExperts reads them), before any Transpose. Several
  /// rules may then name the same base, one per lane. Copied once into
  /// memory the view owns; f32, f16 and bf16 only.
  int64_t lanes = 1, lane = 0;
  /// chunks > 1: the base's outermost stored dim holds `chunks` equal
  /// tensors one after another, and this rule takes chunk `chunk`, in place
  /// (no copy): OpenCLIP's fused attention in_proj_weight [3·n, n] as
  /// transformers' q_proj, k_proj, v_proj [n, n]. Several rules may name
  /// the same base, one per chunk. Only with TensorTransform::None.
  int64_t chunks = 1, chunk = 0;
  /// Fp8BlockScaled and Mxfp4: the scale tensor's name in the base;
  /// Fp8BlockScaled: the block.
  std::string scale{};
  int64_t block_rows = 128, block_cols = 128;
  /// head_groups > 0: along ne dim `head_axis`, the head_groups ·
  /// head_repeat heads of head_size elements starting at index head_offset
  /// are reordered from grouped order (head g · head_repeat + j) into tiled
  /// order (head j · head_groups + g); elements outside them stay. This is
  /// llama.cpp's qwen35/qwen35moe value-head order (convert_hf_to_gguf.py,
  /// _LinearAttentionVReorderBase: HF Qwen3.5 keeps the value heads of one
  /// key head side by side; the GGUF tiles them). Applied after any ToF32*
  /// transform; copied once into memory the view owns; f32, f16 and bf16.
  int64_t head_groups = 0, head_repeat = 1, head_size = 1, head_offset = 0;
  int head_axis = 0;
  /// view_dims > 0: presented with shape view_ne (ggml order, view_dims
  /// dims, the same number of elements), after the transforms above: HF's
  /// Conv1d weight [C, 1, K] as GGUF's [C, K]. No copy of its own.
  std::array<int64_t, 4> view_ne{1, 1, 1, 1};
  int view_dims = 0;
};

/// Metadata of the view, by GGUF key: an integer, a float, a string, an
/// array of booleans (written to GGUF as an ARRAY of BOOL) or of integers
/// (an ARRAY of INT32: qwen35's rope.dimension_sections).
using MetadataValue = std::variant<int64_t, double, std::string, std::vector<bool>, std::vector<int64_t>>;
using Metadata = std::map<std::string, MetadataValue, std::less<>>;

/// A tensor the view makes itself from settings rather than from the base's
/// bytes (an HF checkpoint's rope scaling from config.json: Llama 3's
/// rope_freqs.weight, LongRoPE's rope_factors_short/long.weight, as
/// llama.cpp's converter writes them). f32; ne in ggml order.
struct SyntheticTensor {
  std::string name;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  int n_dims = 1;
  std::vector<float> data;  ///< ne[0]·ne[1]·ne[2]·ne[3] values
};

/// The view. `base`'s tensor bytes must be a read-only mapping of its files
/// (safetensors_source, gguf_source): once a stack is copied, the view drops
/// the parts' pages from the resident set (madvise). Every tensor of `base`
/// must be named by a rule or listed in
/// `ignored` (tensors an architecture knows it does not need, e.g. rotary
/// caches some checkpoints store); otherwise kvad::Error names it (the
/// unread-tensor guard, seam 7). Throws kvad::Error when a rule names a tensor
/// the base lacks, or a transform meets a format it cannot convert.
/// `synthetic` tensors are added after the renamed ones (a name given twice
/// is an error). `list_only`: the tensors the view would make in memory
/// (stacks, transposes) are listed with their names, formats and shapes but
/// not made (data nullptr): a view for looking up what the checkpoint holds
/// (the quantize-once cache's stamp) without reading or copying its bytes.
/// `key_fields`: metadata key → the setting of the base it came from
/// ("llama.embedding_length" → "config.json hidden_size"), for key_name();
/// tensor_name() gives a renamed tensor's base name beside its own.
std::shared_ptr<const TensorSource> mapped_source(std::shared_ptr<const TensorSource> base,
                                                  const std::vector<TensorRename>& rules, Metadata metadata,
                                                  const std::vector<std::string>& ignored = {},
                                                  std::vector<SyntheticTensor> synthetic = {}, bool list_only = false,
                                                  std::map<std::string, std::string, std::less<>> key_fields = {});

/// The metadata of a view made by mapped_source (nullptr for other sources),
/// for writers that carry it into a GGUF (the quantize-once cache).
const Metadata* mapped_metadata(const TensorSource& s);

}  // namespace kvad

namespace kvad {

/// Several sources as one, each part's tensors under its prefix
/// ("unet." + "conv_in.weight"): the components of an image pipeline, each
/// from its own folder, as one checkpoint whose every tensor a loader must
/// take (seam 7). `path` names the whole for errors; tensor_name() gives
/// the part's own name and file. Metadata: none. Throws kvad::Error when
/// two parts give the same name.
std::shared_ptr<const TensorSource> prefixed_source(
    std::vector<std::pair<std::string, std::shared_ptr<const TensorSource>>> parts, std::string path);

}  // namespace kvad
