// The one answer to "which architectures run where" (DESIGN.md seam 5).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace kvad {

namespace gguf { class File; }

struct ArchEntry {
  std::string name;                    ///< general.architecture value
  std::vector<std::string> backends;   ///< "cpu", later "cuda"
  std::unique_ptr<Model> (*load)(std::shared_ptr<const gguf::File>);
};

/// Every architecture kvad knows, in a stable order.
const std::vector<ArchEntry>& architectures();

/// Comma-separated names of the architectures a backend supports.
std::string supported_architectures(const std::string& backend);

/// Loads the model a GGUF holds for `backend`. Throws kvad::Error naming the
/// architecture and the supported ones when it is unknown or unsupported
/// there, or the file's problem (missing/unused tensor, bad shape).
std::unique_ptr<Model> load_model(std::shared_ptr<const gguf::File> f,
                                  const std::string& backend = "cpu");

}  // namespace kvad
