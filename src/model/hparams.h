#pragma once
#include "model/model.h"

namespace kvad {

namespace gguf { class File; }

/// Reads the hyper-parameters common to decoder-only transformers from the
/// `{general.architecture}.*` GGUF keys (names as in the GGUF spec). n_vocab
/// is left for the architecture (rows of its embedding table). Throws
/// kvad::Error naming the key when a required one is missing or invalid.
HParams read_hparams(const gguf::File& f);

}  // namespace kvad
