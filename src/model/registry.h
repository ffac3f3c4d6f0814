// The one answer to "which architectures run where" (DESIGN.md seam 5).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace kvad {

namespace gguf { class File; }
struct DecoderDesc;

struct ArchEntry {
  std::string name;                    ///< general.architecture value
  std::vector<std::string> backends;   ///< "cpu", "cuda"
  std::unique_ptr<Model> (*load)(std::shared_ptr<const gguf::File>);  ///< the CPU model
  /// The model as data (decoder_desc.h), which the CUDA backend runs; nullptr
  /// for an architecture that is not a plain decoder.
  DecoderDesc (*describe)(std::shared_ptr<const gguf::File>) = nullptr;
};

/// Where and how to load a model (CLI: --device, --dtype, --quant).
struct DeviceOptions {
  std::string device = "cpu";  ///< "cpu" or "cuda"
  /// cuda: the format of dense weights (f32/f16/bf16 in the file) and of
  /// weights whose format has no CUDA kernels: "bf16", "f16" or "f32".
  std::string dtype = "bf16";
  /// cuda: "" keeps each weight's format when the GPU reads it directly
  /// (f32, f16, bf16, q8_0, q4_0, q4_K, q6_K); "none" makes every matrix
  /// `dtype`; "q8_0", "q4_0", "q4_k", "q6_k" requantize every matrix on the
  /// host with the CPU quantizers (rows that do not fit the block fall back
  /// to q8_0, then to `dtype`).
  std::string quant;
};

/// Every architecture kvad knows, in a stable order.
const std::vector<ArchEntry>& architectures();

/// Comma-separated names of the architectures a backend supports.
std::string supported_architectures(const std::string& backend);

/// Empty when `backend` can run here; else why not: "kvad was built without
/// CUDA ...", "no CUDA device: ...", or "unknown device ...".
std::string backend_unavailable(const std::string& backend);

/// Loads the model a GGUF holds for `backend`. Throws kvad::Error naming the
/// architecture and the supported ones when it is unknown or unsupported
/// there, or the file's problem (missing/unused tensor, bad shape).
std::unique_ptr<Model> load_model(std::shared_ptr<const gguf::File> f,
                                  const std::string& backend = "cpu");
/// As above with the device options (DeviceOptions). Throws kvad::Error with
/// backend_unavailable()'s reason when the backend cannot run here.
std::unique_ptr<Model> load_model(std::shared_ptr<const gguf::File> f, const DeviceOptions& o);

#ifdef KVAD_WITH_CUDA
/// model/cuda_decoder.cpp: the GPU-resident model of a decoder description.
std::unique_ptr<Model> load_cuda_decoder(const DecoderDesc& d, const DeviceOptions& o);
#endif

}  // namespace kvad
