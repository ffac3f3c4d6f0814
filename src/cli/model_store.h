// kvad's model store: $KVAD_HOME/models/NAME.gguf (KVAD_HOME defaults to
// ~/.cache/kvad). scripts/models.tsv lists the names scripts/setup fetches.
#pragma once
#include <string>

namespace kvad::cli {

/// The model used when none is named.
inline constexpr const char* kDefaultModel = "smollm2-135m";

/// Directory of the store ($KVAD_HOME/models or ~/.cache/kvad/models).
std::string model_store_dir();

/// A --model argument to a file path: an existing file is used as given;
/// NAME resolves to <store>/NAME.gguf; ORG/NAME[@REV][:QUANT-or-FILE]
/// resolves in the HF cache (hub/cache.h), pulled from the Hub first when it
/// is not there (unless HF_HUB_OFFLINE), saying so on stderr. Empty means
/// kDefaultModel. Throws kvad::Error naming the argument, the store and the
/// models in it when nothing matches, for a repo spec that the cache lacks
/// offline or the pull fails on, and for a safetensors checkpoint (which
/// only GGUF-loading callers reach for now).
std::string resolve_model(const std::string& arg);

/// A --model argument resolved: a GGUF file, or an HF checkpoint directory
/// (config.json + safetensors) with the repo and commit that name it.
struct ResolvedModel {
  std::string path;
  bool checkpoint = false;  ///< an HF checkpoint directory, not a GGUF
  std::string repo;         ///< "org/name" for the HF cache, else the path
  std::string commit;       ///< the snapshot's commit, else "local"
};
/// As resolve_model, and also ORG/NAME of a safetensors checkpoint (from the
/// store's <store>/ORG/NAME/ when setup placed it there, else from the HF
/// cache, pulled when missing) or a local checkpoint directory.
ResolvedModel resolve_model_full(const std::string& arg);

/// $KVAD_HOME (default ~/.cache/kvad).
std::string kvad_home();

/// Peak resident set size of this process so far, bytes.
size_t peak_rss_bytes();

/// A --model / --image-model argument for a picture pipeline, as
/// image::open_pipeline reads it, and the name its pictures' metadata (and
/// kvad serve's model list) give it.
struct PipelinePath {
  std::string path;
  std::string name;  ///< "": the path's own last part (PainterOptions::model_name)
};

/// A .safetensors file, a diffusers folder (model_index.json), or ORG/NAME
/// of a pipeline repo (the store first, then the HF cache, pulled when
/// missing). Throws kvad::Error naming the argument when it is none of them.
PipelinePath resolve_pipeline(const std::string& arg);

}  // namespace kvad::cli
