// The one answer to "which architectures run where" (DESIGN.md seam 5).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "tensor/device.h"
#include "tensor/op_set.h"

namespace kvad {

namespace gguf { class File; }
namespace dist { class Comm; }
class TensorSource;
struct HfNames;

/// Where and how to load a model (CLI: --device, --dtype, --quant).
struct DeviceOptions {
  std::string device = "cpu";  ///< "cpu", "sim", "cuda" or "cuda:N" (tensor/device.h)
  /// cuda: the format of dense weights (f32/f16/bf16 in the file) and of
  /// weights whose format has no CUDA kernels: "bf16", "f16" or "f32".
  std::string dtype = "bf16";
  /// cuda: "" keeps each weight's format when the GPU reads it directly
  /// (f32, f16, bf16, q8_0, q4_0, q4_K, q6_K); "none" makes every matrix
  /// `dtype`; "q8_0", "q4_0", "q4_k", "q6_k" requantize every matrix on the
  /// host with the CPU quantizers (rows that do not fit the block fall back
  /// to q8_0, then to `dtype`). cpu and sim keep every weight as stored.
  std::string quant;
  /// Recurrent layers (qwen3next): snapshot the state every N positions so
  /// a rewind lands on the nearest snapshot (0: no snapshots, every rewind
  /// lands on 0; -1: the architecture's default). CLI --state-snapshot-every.
  int32_t state_snapshot_every = -1;
  /// Pipeline parallel (model/pipeline.h): the world the model is split
  /// over, stage s on rank s (nullptr or a world of one: the whole model),
  /// and the blocks per stage (--layer-split; empty: pipeline_split's even
  /// split). Each rank loads only its blocks, the embedding on the first
  /// stage and the head on the last.
  dist::Comm* comm = nullptr;
  std::vector<int64_t> layer_split;
};

/// What a model is for.
enum class ModelKind {
  Text,       ///< a language model: tokens in, next-token logits out
  Embedding,  ///< a sentence encoder: tokens in, hidden states out (Model::hidden), no logits
  Image,      ///< a diffusion model part (comes with image generation)
};
const char* model_kind_name(ModelKind k);

struct ArchEntry {
  std::string name;                    ///< general.architecture value
  ModelKind kind = ModelKind::Text;
  /// The ops its forward pass runs on every checkpoint (tensor/op_set.h).
  /// The devices it runs on are not listed anywhere: they are the
  /// registered rows that provide all of these (arch_devices).
  OpSet ops;
  /// Builds the model from a checkpoint, its weights on o.device.
  std::unique_ptr<Model> (*load)(std::shared_ptr<const TensorSource> src, const DeviceOptions& o);
  /// How it reads an HF checkpoint (model/hf.h), or nullptr when it reads GGUF only.
  const HfNames* hf = nullptr;
  /// The ops a particular checkpoint runs beyond `ops` (llama's layers with
  /// experts: the MoE ops), or nullptr for none.
  OpSet (*checkpoint_ops)(const TensorSource& src) = nullptr;
};

/// Every architecture kvad knows, in a stable order.
const std::vector<ArchEntry>& architectures();

/// The kind of the registry entry for a model's architecture (hparams().arch);
/// Text for an architecture the registry does not list.
ModelKind model_kind(const Model& m);

/// The registry entry named `arch` (general.architecture), or nullptr.
const ArchEntry* find_architecture(const std::string& arch);

/// The ops of `a` that device type t's row (tensor/backend.h find_backend)
/// does not provide: row_ops(row) subtracted from a.ops and, when `src` is
/// given, from a.checkpoint_ops(*src) too. Everything when this build has
/// no row for t.
OpSet missing_ops(const ArchEntry& a, DeviceType t, const TensorSource* src = nullptr);

/// The device types ("cpu", "cuda", "sim": the rows' names, in DeviceType
/// order) whose registered row provides every op of `a` (and of `src`'s
/// checkpoint_ops when given). Only rows this build has count; whether the
/// device is present on this machine is backend_unavailable's question.
std::vector<std::string> arch_devices(const ArchEntry& a, const TensorSource* src = nullptr);

/// Comma-separated names of the architectures whose ops the row of device
/// type `backend` ("cpu", "sim", "cuda") provides; "" for an unknown type or
/// one this build has no row for.
std::string supported_architectures(const std::string& backend);

/// Empty when `device` can run here; else why not: "kvad was built without
/// CUDA ...", "no CUDA device: ...", or "unknown device ...".
std::string backend_unavailable(const std::string& device);

/// Loads the model a checkpoint holds on the device o.device names. Throws
/// kvad::Error naming the architecture when it is unknown; when the device's
/// row lacks ops it runs, naming them, the devices that run it and the
/// architectures that run on that device; backend_unavailable()'s reason when
/// the device cannot run here; or the checkpoint's problem (missing/unused
/// tensor, bad shape).
std::unique_ptr<Model> load_model(std::shared_ptr<const TensorSource> src, const DeviceOptions& o);
/// The same for a GGUF file.
std::unique_ptr<Model> load_model(std::shared_ptr<const gguf::File> f, const DeviceOptions& o);
std::unique_ptr<Model> load_model(std::shared_ptr<const gguf::File> f, const std::string& device = "cpu");

}  // namespace kvad
