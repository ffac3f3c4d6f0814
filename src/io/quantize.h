// Model quantization: F32/F16/BF16 GGUF -> quantized GGUF (`kvad quantize`).
//
// Source: llama.cpp's llama_model_quantize (src/llama-quant.cpp): which
// tensors are quantized, the per-tensor rules of the K-quant mixtures
// (llama_tensor_get_type), the fallback for rows that are not a whole number
// of blocks, and the file_type ids (enum llama_ftype in llama.h). The row
// quantizers are kvad's cpu_kernels(t).from_float, which reproduce ggml's
// quantize_row_*_ref (what llama.cpp uses without an importance matrix) bit
// for bit, except IQ4_NL, for which llama.cpp searches 15 more scales per
// block than the _ref quantizer (ggml quantize_iq4_nl; done in quantize.cpp).
// On SmolLM2 every tensor kvad writes is byte-identical to llama.cpp's
// (tests/fixtures/quantize/smollm2-rmse.json). The rules, restated
// (README.md "Quantizing" says the same):
//
// Which tensors are quantized. A tensor is quantized when it has at least two
// dimensions larger than one, its name ends in "weight", and it is not one
// llama.cpp keeps as it is: norms ("_norm.weight"), MoE routers
// ("ffn_gate_inp.weight"), position embeddings and token types, Mamba/RWKV/T5
// small tensors, multimodal patch/position tensors (kNotQuantized in
// quantize.cpp lists them). Every other tensor (1-D norms and biases among
// them) is copied byte for byte, in its own type.
//
// Single types (q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q6_k, iq4_nl, tq2_0):
// every quantized tensor gets the type, token embedding and output included
// (llama-quantize --pure). When some tensor's rows (ne[0]) are not a multiple
// of the type's block (256 for q2_k/q6_k/tq2_0, 32 for the others) but are
// a multiple of 32, kvad refuses before any work, naming the tensor and the
// types that fit; rows that no block divides (e.g. DeepSeek's q_lora_rank 24
// in a tiny model) are written F16, as llama-quantize does.
//
// Mixtures (q3_k_m, q4_k_s, q4_k_m, q5_k_m): base type Q3_K/Q4_K/Q4_K/Q5_K,
// with more bits where llama.cpp measured that quantization error hurts most:
//  - output.weight, and token_embd.weight when there is no output.weight
//    (tied embeddings: the same matrix computes the logits): Q6_K, or Q8_0
//    when ne[0] is not a multiple of 256.
//  - attn_v (also attn_qkv, attn_kv_b; i = its rank among them in layer
//    order, n = their count): the V projection is small (n_head_kv heads) and
//    its error goes straight into the attention output.
//      q3_k_m: Q5_K for i < 2, else Q4_K.
//      q4_k_s: Q5_K for i < 4.
//      q4_k_m, q5_k_m: Q6_K where use_more_bits(i, n).
//  - ffn_down (i = layer from "blk.N.", n = block count): the largest
//    activations pass through it.
//      q3_k_m: Q5_K for i < n/16, else Q4_K.
//      q4_k_s: Q5_K for i < n/8.
//      q4_k_m, q5_k_m: Q6_K where use_more_bits(i, n).
//  - attn_output: q3_k_m: Q4_K.
//  use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 (integer
//  division): the first and last eighth of the layers and every third one
//  between them.
//  Then the fallback: a type whose block does not divide ne[0] becomes
//  Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0 (block 32;
//  F16 when even 32 does not divide ne[0]). The progress line shows it.
//  Not reproduced: llama.cpp's special cases for Falcon, for 70B llama
//  models (attn_v Q5_K) and for 8-expert MoE models (attn_k/attn_v Q8_0,
//  attn_output Q5_K).
//
// The output keeps every metadata key of the input, in order, with
// general.file_type set to the mixture's llama_ftype and
// general.quantization_version set to 2; the tensors keep their order and the
// file keeps its GGUF version and alignment.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "tensor/dtype.h"

namespace kvad {
class ThreadPool;
namespace gguf {
class File;
class Value;
}
}  // namespace kvad

namespace kvad::quant {

/// One `--type` choice.
struct QuantType {
  const char* name;    ///< "q4_k_m"
  uint32_t file_type;  ///< llama_ftype written to general.file_type (15)
  DType base;          ///< the type most tensors get (Q4_K)
  bool mixture;        ///< per-tensor rule (above) instead of one type
};

/// Every type `kvad quantize` makes, in the order help lists them.
const std::vector<QuantType>& quant_types();
/// "q8_0, q4_0, ..., tq2_0".
std::string quant_type_names();
/// Looks a type up by name, case-insensitive ("Q4_K_M" works). Throws
/// kvad::Error naming the valid ones when it is unknown.
const QuantType& find_quant_type(std::string_view name);
/// The plain float forms besides quant_types() that the quantize-once cache
/// writes (llama-quantize's F32, F16 and BF16; general.file_type 0, 1, 32):
/// f32, f16, bf16. With them every tensor the rule above quantizes is
/// written in that type (dequantized, for a quantized source).
const std::vector<QuantType>& float_types();
/// find_quant_type, also taking float_types()' names; the error names both lists.
const QuantType& find_form_type(std::string_view name);

/// What the rule needs of a tensor.
struct TensorDesc {
  std::string name;
  std::vector<int64_t> ne;  ///< ggml order: ne[0] is the row length
  DType type = DType::F32;  ///< its type in the input
};

/// The rule's answer for one tensor.
struct TensorChoice {
  bool quantize = false;  ///< false: copied byte for byte
  DType type = DType::F32;  ///< type written (the input type when copied)
  DType wanted = DType::F32;  ///< type the rule chose before the fallback
  bool fallback = false;  ///< type != wanted because ne[0] % block(wanted) != 0
};

/// True when llama.cpp's rule quantizes a tensor of this name and shape.
bool is_quantized_tensor(const std::string& name, const std::vector<int64_t>& ne);

/// The per-tensor types for a model, one entry per tensor, in order.
/// n_layer: the model's block count (`<arch>.block_count`), the n of the
/// ffn_down rule; 0: the number of ffn_down tensors. Throws kvad::Error,
/// before any work, when a single type's block does not divide some
/// quantized tensor's ne[0] that 32 divides (naming it and the types that
/// fit; rows 32 does not divide get F16, a fallback), or when a
/// tensor to quantize is not F32, F16 or BF16 (naming it and its type)
/// unless `allow_requantize` (llama-quantize's --allow-requantize): then a
/// quantized tensor is converted too (dequantized row by row, then
/// quantized), except one already in the type chosen for it, which is copied.
std::vector<TensorChoice> plan(const std::vector<TensorDesc>& tensors, const QuantType& type, int64_t n_layer = 0,
                               bool allow_requantize = false);

/// One line of progress, given after each tensor is written.
struct Progress {
  size_t index = 0;  ///< 0-based
  size_t count = 0;
  const gguf::File* input = nullptr;  ///< the input file (quantize_gguf), else nullptr
  std::string name;                  ///< the tensor written
  const TensorChoice* choice = nullptr;
  double ms = 0;     ///< time spent on this tensor (convert, quantize, write)
};

struct Options {
  int threads = 0;  ///< 0: all hardware threads
  /// Called after each tensor; empty: silent.
  std::function<void(const Progress&)> progress;
};

struct Result {
  size_t n_tensors = 0;
  size_t n_quantized = 0;
  size_t n_fallback = 0;
  size_t in_bytes = 0;   ///< tensor data read, bytes
  size_t out_bytes = 0;  ///< tensor data written, bytes
  double seconds = 0;
};

/// Quantizes `in_path` into `out_path` with a --type. Plans first (errors
/// above, before any output exists), then writes `out_path`.tmp and renames
/// it to `out_path` only when complete; on any error the .tmp is removed and
/// `out_path` is untouched. Throws kvad::Error (GGUFError for an unreadable
/// input; "cannot write" naming the path for an output that cannot be made).
Result quantize_file(const std::string& in_path, const std::string& out_path, const QuantType& type,
                     const Options& options = {});

/// The same with an explicit plan (one TensorChoice per tensor of `in`, as
/// plan() makes them) and the general.file_type to write; for tests that
/// quantize part of a model by the whole model's plan.
Result quantize_gguf(const gguf::File& in, const std::vector<TensorChoice>& choices, uint32_t file_type,
                     const std::string& out_path, const Options& options = {});

/// One tensor to write, from any source (a GGUF, a safetensors checkpoint).
struct InputTensor {
  std::string name;          ///< GGUF name written
  DType type = DType::F32;   ///< type of `data`
  std::vector<int64_t> ne;   ///< ggml order
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;
  /// Empty: rows written in order. Else output row r is input row row_map[r]
  /// (e.g. an HF llama checkpoint's Q/K rows permuted into GGUF's layout),
  /// and the output has row_map.size() rows, which may be a subset of data's
  /// n_bytes / row-size rows (one of the GGUF tensors a fused HF tensor is
  /// split into); ne must give that many rows. An entry past data's rows
  /// throws kvad::Error.
  std::vector<int64_t> row_map;
  /// Set: rows are made on demand instead of read from `data` (which may
  /// then be null; row_map must be empty): fill(r0, n, dst) writes rows
  /// [r0, r0 + n) in `type`, row_bytes(type, ne[0]) bytes each, to dst (a
  /// layout the source does not hold as rows, e.g. a convolution's weight
  /// with its input channels moved innermost). n_bytes is still the
  /// tensor's size in `type`.
  std::function<void(int64_t r0, int64_t n, uint8_t* dst)> fill;
};

/// The writer behind quantize_gguf, for any list of tensors: the metadata
/// (general.file_type and general.quantization_version set as quantize_file
/// does), then each tensor copied or quantized by its TensorChoice (a
/// tensor quantized from any format kvad's CPU kernels read), written
/// as `out_path`.tmp and renamed when complete. `origin` names the input in
/// errors; `in` (may be null) is passed to the progress callback.
Result quantize_tensors(uint32_t version, const std::vector<gguf::Value>& metadata,
                        const std::vector<InputTensor>& tensors, const std::vector<TensorChoice>& choices,
                        uint32_t file_type, const std::string& out_path, const Options& options = {},
                        const std::string& origin = "", const gguf::File* in = nullptr);

/// Quantizes `n_rows` rows of `n_per_row` f32 values ([n_rows, n_per_row],
/// row-major) into `type` (n_per_row % block_elems == 0), rows split over the
/// pool's threads (nullptr: this thread). dst holds n_rows * row_bytes(type,
/// n_per_row) bytes.
void quantize_rows(const float* src, int64_t n_rows, int64_t n_per_row, DType type, void* dst,
                   ThreadPool* pool = nullptr);

}  // namespace kvad::quant
