// LoRA adapters at run time (DESIGN.md seam 11): a side path beside a
// linear, never merged into its weights (Hu et al. 2021, "LoRA: Low-Rank
// Adaptation of Large Language Models"; peft's LoraLayer, llama.cpp's
// llama_adapter_lora). A linear y = x·Wᵀ adapted by adapters u gives
//   y = x·Wᵀ + Σ_u strength_u · scale_u · (x·A_uᵀ)·B_uᵀ
// with scale = alpha / r (peft's lora_alpha / r; llama.cpp's
// adapter.lora.alpha / rank), alpha / √r for rsLoRA (Kalajdzievski 2023),
// computed in f32 whatever W's format (GGUF block formats, bf16, f16, f32).
// The model is const while it runs and shared by sessions, so an adapter is
// a value of its own that each batch names (BatchView::lora); any number of
// batches may use the same loaded adapter at once.
//
// The pairs are found by the adapted weight's kvad (GGUF) name, so the same
// mechanism serves any op whose weight is a named Tensor: the text blocks'
// projections today, an image model's linears and convolutions later.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/device.h"
#include "tensor/tensor.h"

namespace kvad {

class Model;

/// One low-rank pair beside a linear W [n_in → n_out] (ne {n_in, n_out}):
/// a: [n_in → r] (ne {n_in, r}, peft's lora_A.weight [r, n_in]), b: [r →
/// n_out] (ne {r, n_out}, peft's lora_B.weight [n_out, r]), both f32 on the
/// model's device; scale: alpha / r, or alpha / √r (rsLoRA).
struct LoraPair {
  Tensor a, b;
  float scale = 1.0f;
};

/// A loaded adapter: its pairs by the adapted weight's kvad name
/// ("blk.0.attn_q.weight"). Immutable once loaded; requests share it.
struct LoraAdapter {
  std::string path;  ///< where it came from, for messages
  std::string arch;  ///< the base's general.architecture it was placed on
  std::map<std::string, LoraPair, std::less<>> pairs;
  size_t bytes = 0;  ///< bytes of a and b as stored on the device
  /// The pair beside weight `name`, nullptr when the adapter leaves it alone.
  const LoraPair* find(std::string_view name) const;
};

/// One adapter in use and its strength (llama.cpp's per-request scale).
struct LoraUse {
  std::shared_ptr<const LoraAdapter> adapter;
  float strength = 1.0f;
};

/// The adapters every row of a batch runs through, each with its strength.
/// Empty: the base model.
struct LoraSet {
  std::vector<LoraUse> uses;
  bool empty() const { return uses.empty(); }
};

/// The adapters of one forward piece as the blocks apply them: every
/// adapter some row runs through, with the strength of each row. A batch
/// may mix adapters (each row through its own set, none included): each
/// adapter's side path is computed for all rows and weighted per row, so
/// rows without it get exactly 0 added (as Punica/S-LoRA gather per row;
/// here by a per-row weight, which costs r-wide products for every row).
struct LoraBatch {
  struct Use {
    const LoraAdapter* adapter = nullptr;
    float strength = 0;  ///< every row's, when `rows` is empty
    Tensor rows;         ///< else each row's strength: ne {1, n_tok} f32 on the batch's device
  };
  std::vector<Use> uses;
  /// The uses of a batch of n rows on device d: `all` for every row, or
  /// rows[i] for row i (nullptr: the base) when `rows` is given. Adapters
  /// listed twice add their strengths. nullptr when no row has an adapter
  /// at a nonzero strength.
  static std::shared_ptr<const LoraBatch> make(const LoraSet* all, const LoraSet* const* rows, int64_t n, Device d);
};

/// y + Σ_u strength_u · scale_u · (x·a_uᵀ)·b_uᵀ over the adapters of `lb`
/// with a pair for weight `w` (by w.name), strength_u per row when the
/// batch mixes them; y itself when there are none (lb nullptr: the base's
/// logits exactly). x: [n_tok, n_in] f32; y: [n_tok, n_out] f32 (matmul(x,
/// w)). Runs on x's device through ops::matmul / scale / mul / add, so on
/// every backend row. Throws kvad::Error when a pair's dims are not the
/// product's.
Tensor lora_add(const LoraBatch* lb, const Tensor& w, const Tensor& x, const Tensor& y);

/// ops::matmul(x, w, bias) with the adapters' side paths added (lora_add).
Tensor linear(const LoraBatch* lb, const Tensor& x, const Tensor& w, const Tensor* bias = nullptr);
/// ops::matmul_multi(x, ws) with each product's side paths added.
std::vector<Tensor> linear_multi(const LoraBatch* lb, const Tensor& x, std::initializer_list<const Tensor*> ws);

/// Parses "PATH[@STRENGTH]" (kvad run/chat --lora): the path and the
/// strength (1 when absent). Throws kvad::Error for a strength that is not
/// a finite number ("nan", "inf", "x").
std::pair<std::string, float> parse_lora_arg(const std::string& arg);

/// Loads the adapter at `path` for `model`, its pairs placed on the model's
/// device in f32:
///  - a PEFT folder: adapter_config.json (r, lora_alpha, use_rslora,
///    rank_pattern, alpha_pattern) and adapter_model.safetensors (keys
///    base_model.model.<HF module>.lora_A.weight / lora_B.weight), HF module
///    names mapped to kvad's through the architecture's HF name table
///    (model/hf.h);
///  - a llama.cpp GGUF adapter (general.type = adapter, adapter.type = lora,
///    adapter.lora.alpha; tensors <weight>.lora_a / .lora_b).
/// Q and K rows are permuted as llama.cpp's converter permutes them when
/// the adapter's and the base's layouts differ (a GGUF llama base, a GGUF
/// adapter on an HF base). Throws kvad::Error naming the file and: a key
/// that cannot be placed on the base; a pair whose shapes do not fit the
/// base weight (both shapes); lora_A and lora_B of different ranks, or a
/// rank other than the config's r; a missing adapter_config.json; a GGUF
/// adapter of another architecture; a folder or file that is neither.
std::shared_ptr<const LoraAdapter> load_lora(const std::string& path, const Model& model);

}  // namespace kvad
