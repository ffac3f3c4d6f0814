#pragma once
#include "model/model.h"

namespace kvad {

class TensorSource;

/// Reads the hyper-parameters common to decoder-only transformers from the
/// `{general.architecture}.*` GGUF keys (names as in the GGUF spec), for an
/// architecture to start its own hyper-parameter struct from. n_vocab
/// is left for the architecture (rows of its embedding table). Throws
/// kvad::Error naming the key when a required one is missing or invalid.
HParams read_hparams(const TensorSource& f);

}  // namespace kvad
