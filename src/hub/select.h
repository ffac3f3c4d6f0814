// Which files of a repo make the model a user named: the rules `kvad pull`
// applies to the server's file list and resolve_hf applies to a cached
// snapshot, so both agree on what "the model" is.
#pragma once
#include <string>
#include <vector>

namespace kvad::hub {

/// What a selector picked out of a repo's file list.
struct Selection {
  /// Pipeline: a diffusers pipeline repo (model_index.json at its root), loaded from the snapshot folder.
  enum class Kind { Checkpoint, Gguf, File, Pipeline };
  Kind kind = Kind::File;
  /// Files to fetch, repo-relative, sorted. For Gguf, all split parts.
  std::vector<std::string> files;
  /// What the model is loaded from, repo-relative: the first GGUF part, the
  /// named file, or "" for a Checkpoint (the snapshot folder itself).
  std::string entry;
};

/// A split GGUF part, llama.cpp's `NAME-00001-of-00003.gguf` (gguf-split).
struct GgufSplit {
  std::string prefix;  ///< "dir/NAME" (without "-0000k-of-0000n.gguf")
  int index = 0;       ///< 1-based
  int count = 0;
};

/// Parses a split part's name; false when `name` is not one (including
/// index 0, index > count or count > 99999).
bool parse_gguf_split(const std::string& name, GgufSplit& out);

/// The part names of a split set, `prefix-00001-of-0000n.gguf` ..., in order.
std::vector<std::string> gguf_split_names(const std::string& prefix, int count);

/// The quant tag in a GGUF file name as llama.cpp's `-hf` matches it
/// ("Q4_K_M", "IQ4_XS", "BF16", "UD-Q4_K_XL", ...), upper-cased; "" when
/// none. The split suffix and extension are not part of it.
std::string gguf_quant_tag(const std::string& name);

/// True for the files a checkpoint needs besides its weights: config.json,
/// generation_config.json and the tokenizer files (tokenizer.json,
/// tokenizer_config.json, special_tokens_map.json, tokenizer.model,
/// vocab.json, merges.txt, vocab.txt, added_tokens.json,
/// chat_template.jinja, chat_template.json), at the repo root.
bool is_checkpoint_support_file(const std::string& name);

/// The component folders of a diffusers pipeline that kvad's image models
/// read (model/image/pipeline.h): unet, vae, text_encoder, text_encoder_2,
/// tokenizer, tokenizer_2, scheduler. Others (safety_checker,
/// feature_extractor, ONNX/OpenVINO exports) are never fetched.
const std::vector<std::string>& pipeline_components();

/// Of the file names in one component folder (no folder part), the weights
/// to read for `variant` ("" or "fp16", diffusers' NAME.<variant>.safetensors
/// and NAME.safetensors.index.<variant>.json): the variant's index or single
/// file, else the plain one (no variant), else -- for variant "" -- the
/// only variant there is. Shards of an index are not listed (the index
/// names them). Empty when there is none; more than one when it is
/// ambiguous (the caller says so).
std::vector<std::string> pick_component_weights(const std::vector<std::string>& names, const std::string& variant);

/// Picks the files of the model `selector` names from `files` (every file of
/// the repo, repo-relative; validated by the caller):
///  - "" or a variant ("fp16") of a repo with model_index.json at its root:
///    a diffusers pipeline -- model_index.json and, of each folder of
///    pipeline_components() there is, its config.json /
///    scheduler_config.json, tokenizer files and the weights
///    pick_component_weights chooses (with an index: the shards it names,
///    read by the caller; here: every NAME-0000k-of-0000n shard beside it);
///  - "" : a safetensors checkpoint when the root has *.safetensors (the
///    support files above, the shards and model.safetensors.index.json;
///    `consolidated*.safetensors` left out when other shards exist), else the
///    repo's GGUF: the Q4_K_M one, else the only one;
///  - an exact file name: that file, or every part of its split set;
///  - anything else, a quant tag, matched case-insensitively against the GGUF
///    names as a whole token ("Q4_K" does not pick "Q4_K_M"); mmproj files are
///    never picked by a tag.
/// Throws kvad::Error naming `repo` and what there is (the quant tags, or
/// the files) when nothing or more than one model matches, or when a split
/// set is missing parts.
Selection select_model_files(const std::vector<std::string>& files, const std::string& selector,
                             const std::string& repo);

}  // namespace kvad::hub
