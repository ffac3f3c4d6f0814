// The quantize-once cache: an HF checkpoint (model/hf.h's view), or a GGUF,
// converted once to a GGUF that later loads map directly
// (quantize_once.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace kvad {

class TensorSource;


/// Where quantize_once keeps its files and what identifies the checkpoint.
struct QuantizeOnceKey {
  std::string cache_dir;  ///< $KVAD_HOME/cache
  std::string repo;       ///< "HuggingFaceTB/SmolLM2-135M-Instruct", or the directory for a local checkpoint
  std::string commit;     ///< the snapshot's commit (or "local")
  /// The directory holding tokenizer.json (and tokenizer_config.json), whose
  /// tokenizer the file keeps (tokenizer_json_gguf_keys); empty, or a
  /// directory without tokenizer.json: none.
  std::string tokenizer_dir = {};
};

/// The GGUF keys quantize_once stamps its files with (read by `kvad cache`).
namespace quantize_once_keys {
inline constexpr const char* kRepo = "kvad.source.repo";        ///< STRING: QuantizeOnceKey::repo
inline constexpr const char* kCommit = "kvad.source.commit";    ///< STRING: QuantizeOnceKey::commit
inline constexpr const char* kTensors = "kvad.source.tensors";  ///< STRING: "name:dtype;" per source tensor
/// STRING: "file:bytes:mtime;" of tokenizer.json and tokenizer_config.json
/// ("" without a tokenizer): a changed tokenizer makes the file stale.
inline constexpr const char* kTokenizer = "kvad.source.tokenizer";
inline constexpr const char* kQuant = "kvad.cache.quant";       ///< STRING: the --quant type
inline constexpr const char* kVersion = "kvad.cache.version";   ///< UINT32: the cache's format version
/// STRING: "path:bytes:mtime;" of each file of a GGUF source
/// (quantize_once_gguf): a changed or replaced file makes the entry stale.
inline constexpr const char* kFile = "kvad.source.file";
}  // namespace quantize_once_keys

/// The quantize-once cache (DESIGN.md seams 7 and 9): the
/// checkpoint `hf` (open_hf_checkpoint's view) quantized with `quant` (one of
/// `kvad quantize`'s types: q8_0, q4_0, q4_k_m, ...; io/quantize.h rules)
/// and written once as a GGUF in key.cache_dir, named by repo, commit, quant
/// and kvad's cache format version, with llama.cpp's names, layout and
/// metadata as its convert_hf_to_gguf.py writes them (llama's Q/K rows
/// permuted to GGUF's layout; qwen3next's ssm_in split into attn_qkv and
/// attn_gate; deepseek2's attn_kv_b into attn_k_b and attn_v_b, its MTP
/// layers left out; qwen35's value heads in the converter's tiled order, as
/// the HF view already holds them; 0/1 flags as GGUF BOOLs) and stamped with the
/// checkpoint's full tensor list (`kvad.source.tensors`), and with the
/// tokenizer of key.tokenizer_dir as GGUF keys (llama.cpp's tokenizer.ggml.*
/// and kvad.tokenizer.*, tokenizer_json_gguf_keys; Tokenizer::from_gguf reads
/// it back). A later call maps that file directly; a file whose stamps no
/// longer match the checkpoint (a tensor added or gone, the tokenizer files
/// changed) is rewritten. Returns the GGUF's source; *hit
/// (if given) says whether the file was already there. Throws kvad::Error
/// for an unknown type, a tensor the type cannot take, or an unwritable cache.
std::shared_ptr<const TensorSource> quantize_once(std::shared_ptr<const TensorSource> hf, const std::string& quant,
                                                  const QuantizeOnceKey& key, bool* hit = nullptr);
/// The same for the checkpoint in directory `dir`. A cache hit is found
/// from open_hf_checkpoint(dir, list_only = true) and maps the cached GGUF
/// alone: none of the checkpoint's tensors is read, and HF MoE experts are
/// not stacked into memory (the GGUF's 3-D ffn_*_exps are used in place).
/// A miss opens the checkpoint in full and quantizes it as above.
std::shared_ptr<const TensorSource> quantize_once(const std::string& dir, const std::string& quant,
                                                  const QuantizeOnceKey& key, bool* hit = nullptr);

/// GGUF llama files store each head's Q/K rows interleaved for adjacent-pair
/// RoPE (llama.cpp's convert_hf_to_gguf permute()): element j of the result
/// is the HF row that GGUF row j holds, for a Q or K matrix of n_rows rows
/// in n_head heads (GGUF row h·D + 2i + half = HF row h·D + half·D/2 + i).
std::vector<int64_t> llama_qk_rows(int64_t n_rows, int64_t n_head);

/// The cache file quantize_once uses for `key` and `quant`.
std::string quantize_once_path(const QuantizeOnceKey& key, const std::string& quant);

/// The quantize-once cache with a GGUF as its source: the model at `path`
/// (gguf_split_source: a GGUF, or any part of a split one) in the form
/// `target`, one of io/quantize.h's find_form_type names: a quant type
/// (q8_0, q4_0, q4_k_m, ...; llama.cpp's rules pick each tensor's type, as
/// llama-quantize --allow-requantize does) or f32 / f16 / bf16. Each tensor
/// the rule converts is read through its CPU to_float (exact for every
/// ggml block format: the same floats a matmul on the stored tensor sees)
/// and written in its new type; a tensor already in its chosen type, and
/// every tensor the rule keeps (norms, biases), is copied byte for byte.
/// Every metadata key is kept (the tokenizer and chat template among them)
/// but split.*; kvad.source.file stamps the source files' paths, sizes and
/// modification times, and the file is named by them and `target` in
/// `cache_dir`. A later call with the same files maps the entry directly
/// (*hit true, when given). Throws kvad::Error for an unknown target, an
/// unreadable source, a tensor no CPU kernel reads, or an unwritable cache.
std::shared_ptr<const TensorSource> quantize_once_gguf(const std::string& path, const std::string& target,
                                                       const std::string& cache_dir, bool* hit = nullptr);
/// "path:bytes:mtime;" of each file, its path made absolute: what an entry
/// made from these files is stamped with (kvad.source.file), so that a
/// changed or replaced file makes it stale. Throws kvad::Error naming a file
/// whose size cannot be read.
std::string quantize_once_file_stamp(const std::vector<std::string>& files);
/// The cache entry `cache_dir`/STEM--H--TYPE--vVERSION.gguf of a source named
/// `stem` and stamped `stamp`: H the first 12 hex digits of the stamp's
/// FNV-1a (64 bits), characters other than letters, digits, '.', '-' and
/// '_' of stem and type as '-'.
std::string quantize_once_entry_path(const std::string& cache_dir, const std::string& stem, const std::string& stamp,
                                     const std::string& type, int64_t version);
/// The first 16 hex digits of FNV-1a (64 bits) of s: a stable name for a stamp.
std::string quantize_once_hash(const std::string& s);

/// The cache file quantize_once_gguf uses for `path` (as it is now) and `target`.
std::string quantize_once_gguf_path(const std::string& path, const std::string& target, const std::string& cache_dir);

}  // namespace kvad
