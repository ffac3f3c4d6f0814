// The quantize-once cache (model/quantize_once.h).
#include <cctype>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <set>

#include "base/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/quantize.h"
#include "io/tensor_source.h"
#include "model/hf.h"
#include "model/quantize_once.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

namespace fs = std::filesystem;

namespace {

namespace keys = quantize_once_keys;

// Bump when the file's layout or rules change. 2: the tokenizer's keys.
// 3: llama.cpp's split layouts (qwen3next attn_qkv/attn_gate, deepseek2
// attn_k_b/attn_v_b) and BOOL keys.
constexpr int64_t kCacheVersion = 3;

std::string safe(const std::string& s) {
  std::string o;
  for (char c : s) o += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ? c : '-';
  return o;
}

// Keys GGUF types as BOOL (gguf-py's add_bool; llama.cpp refuses them as
// integers: "has wrong type u32 but expected type bool"), which kvad's HF
// views hold as 0/1 integers.
bool is_bool_key(const std::string& key) {
  for (const char* suffix : {".expert_weights_norm", ".attention.causal", ".use_parallel_residual",
                             ".rope.scaling.finetuned", ".swin_norm", ".ssm.dt_b_c_rms"})
    if (key.ends_with(suffix) && key.rfind("kvad.", 0) != 0) return true;
  return false;
}

std::vector<gguf::Value> gguf_metadata(const Metadata& md) {
  std::vector<gguf::Value> v;
  for (const auto& [key, val] : md) {
    if (key == "kvad.rope.neox") continue;  // rows are permuted to GGUF's layout below
    if (const int64_t* i = std::get_if<int64_t>(&val); i && is_bool_key(key)) {
      v.push_back(gguf::make_bool(key, *i != 0));
    } else if (const int64_t* i = std::get_if<int64_t>(&val)) {
      // GGUF's llama.cpp readers take the dims as uint32.
      v.push_back(*i >= 0 && *i <= UINT32_MAX ? gguf::make_uint(key, gguf::ValueType::UINT32, static_cast<uint64_t>(*i))
                                              : gguf::make_int(key, gguf::ValueType::INT64, *i));
    } else if (const double* d = std::get_if<double>(&val)) {
      v.push_back(gguf::make_float(key, gguf::ValueType::FLOAT32, *d));
    } else if (const std::vector<bool>* b = std::get_if<std::vector<bool>>(&val)) {
      v.push_back(gguf::make_uint_array(key, gguf::ValueType::BOOL, std::vector<uint64_t>(b->begin(), b->end())));
    } else if (const std::vector<int64_t>* a = std::get_if<std::vector<int64_t>>(&val)) {
      v.push_back(gguf::make_int_array(key, gguf::ValueType::INT32, *a));  // as gguf-py writes int lists
    } else {
      v.push_back(gguf::make_string(key, std::get<std::string>(val)));
    }
  }
  return v;
}

// ---- llama.cpp's layout for tensors kvad reads in HF's form ---------------

// The tensors and keys written, in llama.cpp's converter's layout
// (convert_hf_to_gguf.py) where kvad's HF view keeps HF's: owned holds the
// bytes of tensors made here (a transpose), dropped_keys the view's keys
// llama.cpp reads otherwise, added_keys keys the converter writes beside.
struct Layout {
  std::vector<quant::InputTensor> tensors;
  std::deque<std::vector<uint8_t>> owned;
  std::set<std::string> dropped_keys;
  std::vector<gguf::Value> added_keys;
};

quant::InputTensor input_of(const SourceTensor& t) {
  std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + std::max(1, t.n_dims));
  return {t.name, t.type, ne, static_cast<const uint8_t*>(t.data), t.n_bytes, {}, {}};
}

// "blk.N." + rest → N and rest; false for another name.
bool block_tensor(const std::string& name, int64_t& il, std::string& rest) {
  if (name.rfind("blk.", 0) != 0) return false;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot - 4 > 6) return false;
  for (size_t i = 4; i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  il = std::stoll(name.substr(4, dot - 4));
  rest = name.substr(dot + 1);
  return true;
}

int64_t positive_key(const TensorSource& hf, const std::string& key) {
  const int64_t v = hf.get_int(key, 0);
  if (v <= 0) throw Error(hf.path() + ": " + key + " must be positive to write the quantize-once file");
  return v;
}

// Qwen3-Next (llama.cpp's Qwen3NextModel.modify_tensors): HF's fused
// in_proj_qkvz (kvad's ssm_in: per key head [q (Dk) | k (Dk) | v (r·Dv) |
// z (r·Dv)], r = Hv / Hk) is written as attn_qkv (every head's q, then every
// head's k, then every head's v: the convolution's channel order) and
// attn_gate (every head's z), row subsets of the same bytes; the conv1d
// weight [C, 1, K] as [C, K]; and attention.recurrent_layers from which
// layers have DeltaNet tensors. in_proj_ba (ssm_ba) keeps HF's per key head
// [b | a], as llama.cpp reads it. True when `t` was taken.
bool qwen3next_tensor(const TensorSource& hf, const SourceTensor& t, Layout& out) {
  int64_t il;
  std::string rest;
  if (!block_tensor(t.name, il, rest)) return false;
  const std::string p = "blk." + std::to_string(il) + ".";
  if (rest == "ssm_conv1d.weight" && t.n_dims == 3 && t.ne[1] == 1) {
    quant::InputTensor it = input_of(t);
    it.ne = {t.ne[0], t.ne[2]};
    out.tensors.push_back(std::move(it));
    return true;
  }
  if (rest != "ssm_in.weight") return false;
  const std::string a = "qwen3next.";
  const int64_t Dk = positive_key(hf, a + "ssm.state_size"), Hk = positive_key(hf, a + "ssm.group_count");
  const int64_t Hv = positive_key(hf, a + "ssm.time_step_rank"), inner = positive_key(hf, a + "ssm.inner_size");
  if (Hv % Hk != 0 || inner % Hv != 0)
    throw Error(hf.path() + ": " + a + "ssm.time_step_rank must be a multiple of ssm.group_count, and ssm.inner_size "
                "of ssm.time_step_rank");
  const int64_t Dv = inner / Hv, rv = Hv / Hk * Dv, per_head = 2 * Dk + 2 * rv;
  if (t.n_dims != 2 || t.ne[1] != Hk * per_head)
    throw Error(hf.path() + ": tensor " + t.name + " has " + std::to_string(t.ne[1]) + " rows where the ssm.* keys give " +
                std::to_string(Hk * per_head));
  quant::InputTensor qkv = input_of(t), gate = input_of(t);
  qkv.name = p + "attn_qkv.weight";
  gate.name = p + "attn_gate.weight";
  for (int64_t off : {int64_t{0}, Dk, 2 * Dk})
    for (int64_t h = 0; h < Hk; ++h)
      for (int64_t i = 0; i < (off == 2 * Dk ? rv : Dk); ++i) qkv.row_map.push_back(h * per_head + off + i);
  for (int64_t h = 0; h < Hk; ++h)
    for (int64_t i = 0; i < rv; ++i) gate.row_map.push_back(h * per_head + 2 * Dk + rv + i);
  qkv.ne = {t.ne[0], static_cast<int64_t>(qkv.row_map.size())};
  gate.ne = {t.ne[0], static_cast<int64_t>(gate.row_map.size())};
  out.tensors.push_back(std::move(qkv));
  out.tensors.push_back(std::move(gate));
  return true;
}

void qwen3next_keys(const TensorSource& hf, Layout& out) {
  const int64_t n_layer = hf.get_int("qwen3next.block_count", 0);
  if (n_layer <= 0 || hf.has("qwen3next.attention.recurrent_layers")) return;
  std::vector<uint64_t> recurrent(static_cast<size_t>(n_layer));
  for (int64_t il = 0; il < n_layer; ++il) recurrent[il] = hf.find("blk." + std::to_string(il) + ".ssm_a") != nullptr;
  out.added_keys.push_back(
      gguf::make_uint_array("qwen3next.attention.recurrent_layers", gguf::ValueType::BOOL, std::move(recurrent)));
}

// DeepSeek V2/V3 (llama.cpp's DeepseekV2Model.modify_tensors): HF's
// kv_b_proj (kvad's attn_kv_b [kv_lora_rank R → H · (N + V)], per head N
// nope rows then V rows) is written split for MLA's absorbed form, as
// attn_k_b [H, R, N] (each head's nope rows transposed: element (n, l, h) is
// kv_b row h·(N + V) + n, column l) and attn_v_b [H, V, R] (each head's V
// rows, a row subset). The multi-token prediction layers (blk.N.* past
// block_count) and nextn_predict_layers are left out, as the converter does
// (skip_mtp): llama.cpp counts them inside block_count, kvad past it, and
// neither runs them. True when `t` was taken (or dropped).
bool deepseek2_tensor(const TensorSource& hf, const SourceTensor& t, Layout& out) {
  int64_t il;
  std::string rest;
  if (!block_tensor(t.name, il, rest)) return false;
  const std::string a = "deepseek2.";
  if (il >= hf.get_int(a + "block_count", 0)) return true;  // the MTP layers: not written
  if (rest != "attn_kv_b.weight") return false;
  const std::string p = "blk." + std::to_string(il) + ".";
  const int64_t H = positive_key(hf, a + "attention.head_count"), R = positive_key(hf, a + "attention.kv_lora_rank");
  const int64_t V = positive_key(hf, a + "attention.value_length_mla");
  const int64_t N = positive_key(hf, a + "attention.key_length_mla") - hf.get_int(a + "rope.dimension_count", 0);
  const DTypeInfo& info = dtype_info(t.type);
  if (N <= 0 || t.n_dims != 2 || t.ne[0] != R || t.ne[1] != H * (N + V) || info.block_elems != 1)
    throw Error(hf.path() + ": tensor " + t.name + " is not [" + std::to_string(H * (N + V)) + ", " +
                std::to_string(R) + "] of a plain float type, as the attention.* keys give");
  const size_t es = info.block_bytes;
  const uint8_t* src = static_cast<const uint8_t*>(t.data);
  std::vector<uint8_t>& kb = out.owned.emplace_back(static_cast<size_t>(H * R * N) * es);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t l = 0; l < R; ++l)
      for (int64_t n = 0; n < N; ++n)
        std::memcpy(kb.data() + static_cast<size_t>((h * R + l) * N + n) * es,
                    src + static_cast<size_t>((h * (N + V) + n) * R + l) * es, es);
  out.tensors.push_back({p + "attn_k_b.weight", t.type, {N, R, H}, kb.data(), kb.size(), {}, {}});
  quant::InputTensor vb = input_of(t);
  vb.name = p + "attn_v_b.weight";
  vb.ne = {R, V, H};
  for (int64_t h = 0; h < H; ++h)
    for (int64_t v = 0; v < V; ++v) vb.row_map.push_back(h * (N + V) + N + v);
  out.tensors.push_back(std::move(vb));
  return true;
}

// The HF view `hf`'s tensors and key changes in llama.cpp's layout.
Layout llama_cpp_layout(const TensorSource& hf) {
  Layout out;
  const std::string arch = hf.get_string("general.architecture", "");
  const bool neox = hf.get_int("kvad.rope.neox", 0) != 0;
  const int64_t n_head = hf.get_int(arch + ".attention.head_count", 0);
  const int64_t n_head_kv = hf.get_int(arch + ".attention.head_count_kv", n_head);
  for (const SourceTensor& t : hf.tensors()) {
    if (arch == "qwen3next" && qwen3next_tensor(hf, t, out)) continue;
    if (arch == "deepseek2" && deepseek2_tensor(hf, t, out)) continue;
    quant::InputTensor it = input_of(t);
    if (neox && arch == "llama" && (t.name.ends_with("attn_q.weight") || t.name.ends_with("attn_k.weight"))) {
      const int64_t heads = t.name.ends_with("attn_q.weight") ? n_head : n_head_kv;
      it.row_map = llama_qk_rows(t.ne[1], heads);
    }
    out.tensors.push_back(std::move(it));
  }
  if (arch == "qwen3next") qwen3next_keys(hf, out);
  if (arch == "deepseek2") out.dropped_keys.insert("deepseek2.nextn_predict_layers");
  return out;
}

std::string stamp_of(const TensorSource& hf) {
  std::string s;
  for (const SourceTensor& t : hf.tensors()) s += t.name + ":" + dtype_name(t.type) + ";";
  return s;
}

// Size and modification time of the tokenizer files ("" without tokenizer.json).
std::string tokenizer_stamp(const std::string& dir) {
  if (dir.empty()) return "";
  std::string s;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    std::error_code ec;
    const fs::path p = fs::path(dir) / name;
    const auto size = fs::file_size(p, ec);
    if (ec) continue;
    const auto mtime = fs::last_write_time(p, ec).time_since_epoch().count();
    s += std::string(name) + ":" + std::to_string(size) + ":" + std::to_string(ec ? 0 : mtime) + ";";
  }
  return s.rfind("tokenizer.json:", 0) == 0 ? s : "";
}

}  // namespace

// GGUF llama files store each head's Q/K rows interleaved for adjacent-pair
// RoPE: GGUF row 2i + half of a head is HF row half · D/2 + i (llama.cpp's
// convert_hf_to_gguf permute()).
std::vector<int64_t> llama_qk_rows(int64_t n_rows, int64_t n_head) {
  std::vector<int64_t> m(n_rows);
  const int64_t D = n_rows / n_head;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < D / 2; ++i)
      for (int64_t half = 0; half < 2; ++half) m[h * D + 2 * i + half] = h * D + half * (D / 2) + i;
  return m;
}

std::string quantize_once_path(const QuantizeOnceKey& key, const std::string& quant) {
  return (fs::path(key.cache_dir) / (safe(key.repo) + "--" + safe(key.commit.substr(0, 12)) + "--" + safe(quant) +
                                     "--v" + std::to_string(kCacheVersion) + ".gguf"))
      .string();
}

namespace {

// The cached GGUF for `hf` (whose tensor list and tokenizer files it is
// stamped with), or nullptr when there is none or it is stale. Reads only
// hf's names and formats, never its bytes.
std::shared_ptr<const TensorSource> cached(const TensorSource& hf, const QuantizeOnceKey& key,
                                           const std::string& path) {
  const std::string stamp = stamp_of(hf), tok_stamp = tokenizer_stamp(key.tokenizer_dir);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return nullptr;
  try {
    std::shared_ptr<const gguf::File> f = gguf::File::open(path);
    if (f->get_string(keys::kTensors, "") == stamp && f->get_string(keys::kTokenizer, "") == tok_stamp &&
        f->get_int(keys::kVersion, 0) == kCacheVersion) {
      fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // "last used", for kvad cache
      return gguf_source(std::move(f));
    }
  } catch (const Error&) {
    // A damaged or foreign file: quantize again over it.
  }
  return nullptr;
}

}  // namespace

std::shared_ptr<const TensorSource> quantize_once(const std::string& dir, const std::string& quant,
                                                  const QuantizeOnceKey& key, bool* hit) {
  (void)quant::find_form_type(quant);
  if (auto c = cached(*open_hf_checkpoint(dir, /*list_only=*/true), key, quantize_once_path(key, quant))) {
    if (hit) *hit = true;
    return c;
  }
  return quantize_once(open_hf_checkpoint(dir), quant, key, hit);
}

std::shared_ptr<const TensorSource> quantize_once(std::shared_ptr<const TensorSource> hf, const std::string& quant,
                                                  const QuantizeOnceKey& key, bool* hit) {
  const quant::QuantType& type = quant::find_form_type(quant);
  const std::string path = quantize_once_path(key, quant);
  const Metadata* md = mapped_metadata(*hf);
  if (!md) throw Error(hf->path() + ": not an HF checkpoint view (open_hf_checkpoint)");
  const std::string stamp = stamp_of(*hf);
  const std::string tok_stamp = tokenizer_stamp(key.tokenizer_dir);
  if (auto c = cached(*hf, key, path)) {
    if (hit) *hit = true;
    return c;
  }
  for (const SourceTensor& t : hf->tensors())
    if (!t.data)
      throw Error(hf->path() + ": tensor " + t.name + " is listed, not loaded (open_hf_checkpoint list_only); "
                  "the quantize-once cache needs the checkpoint's bytes");
  if (hit) *hit = false;
  std::error_code ec;
  fs::create_directories(key.cache_dir, ec);
  if (ec) throw Error("cannot create the quantize-once cache " + key.cache_dir + ": " + ec.message());

  const std::string arch = hf->get_string("general.architecture", "");
  const Layout layout = llama_cpp_layout(*hf);
  std::vector<quant::TensorDesc> descs;
  for (const quant::InputTensor& t : layout.tensors) descs.push_back({t.name, t.ne, t.type});
  const std::vector<quant::TensorChoice> plan = quant::plan(descs, type, hf->get_int(arch + ".block_count", 0));
  Metadata kept = *md;
  for (const std::string& k : layout.dropped_keys) kept.erase(k);
  std::vector<gguf::Value> meta = gguf_metadata(kept);
  for (const gguf::Value& v : layout.added_keys) meta.push_back(v);
  if (!tok_stamp.empty()) {
    const fs::path dir(key.tokenizer_dir);
    const fs::path cfg = dir / "tokenizer_config.json";
    for (gguf::Value& v : tokenizer_json_file_gguf_keys((dir / "tokenizer.json").string(),
                                                        fs::exists(cfg, ec) ? cfg.string() : ""))
      meta.push_back(std::move(v));
  }
  meta.push_back(gguf::make_string(keys::kRepo, key.repo));
  meta.push_back(gguf::make_string(keys::kCommit, key.commit));
  meta.push_back(gguf::make_string(keys::kTensors, stamp));
  meta.push_back(gguf::make_string(keys::kTokenizer, tok_stamp));
  meta.push_back(gguf::make_string(keys::kQuant, type.name));
  meta.push_back(gguf::make_uint(keys::kVersion, gguf::ValueType::UINT32, kCacheVersion));
  quant::Options opt;  // all cores
  quant::quantize_tensors(3, meta, layout.tensors, plan, type.file_type, path, opt, hf->path());
  return gguf_source(gguf::File::open(path));
}

// ---- a GGUF as the source ---------------------------------------------------

namespace {

// The files of the GGUF model at `path` (every part of a split one), in order.
std::vector<std::string> gguf_parts(const std::string& path) {
  std::string prefix;
  int n = 0;
  if (!gguf_split_name(path, &prefix, &n)) return {path};
  std::vector<std::string> parts;
  for (int i = 1; i <= n; ++i) {
    char tail[40];
    std::snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", i, n);
    parts.push_back(prefix + tail);
  }
  return parts;
}

std::string gguf_entry_path(const std::string& path, const std::string& stamp, const std::string& target,
                            const std::string& cache_dir) {
  return quantize_once_entry_path(cache_dir, fs::path(gguf_parts(path)[0]).stem().string(), stamp,
                                  quant::find_form_type(target).name, kCacheVersion);
}

std::string file_stamp(const std::string& path) { return quantize_once_file_stamp(gguf_parts(path)); }

}  // namespace

std::string quantize_once_file_stamp(const std::vector<std::string>& files) {
  std::string s;
  for (const std::string& part : files) {
    std::error_code ec;
    const fs::path abs = fs::weakly_canonical(fs::absolute(part, ec), ec);
    const auto size = fs::file_size(abs, ec);
    if (ec) throw Error(part + ": " + ec.message());
    const auto mtime = fs::last_write_time(abs, ec).time_since_epoch().count();
    s += abs.string() + ":" + std::to_string(size) + ":" + std::to_string(ec ? 0 : mtime) + ";";
  }
  return s;
}

std::string quantize_once_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

std::string quantize_once_entry_path(const std::string& cache_dir, const std::string& stem, const std::string& stamp,
                                     const std::string& type, int64_t version) {
  return (fs::path(cache_dir) / (safe(stem) + "--" + quantize_once_hash(stamp).substr(0, 12) + "--" + safe(type) +
                                 "--v" + std::to_string(version) + ".gguf"))
      .string();
}

std::string quantize_once_gguf_path(const std::string& path, const std::string& target, const std::string& cache_dir) {
  return gguf_entry_path(path, file_stamp(path), target, cache_dir);
}

std::shared_ptr<const TensorSource> quantize_once_gguf(const std::string& path, const std::string& target,
                                                       const std::string& cache_dir, bool* hit) {
  const quant::QuantType& type = quant::find_form_type(target);
  const std::string stamp = file_stamp(path);
  const std::string out = gguf_entry_path(path, stamp, target, cache_dir);
  std::error_code ec;
  if (fs::is_regular_file(out, ec)) {
    try {
      std::shared_ptr<const gguf::File> f = gguf::File::open(out);
      if (f->get_string(keys::kFile, "") == stamp && f->get_int(keys::kVersion, 0) == kCacheVersion) {
        fs::last_write_time(out, fs::file_time_type::clock::now(), ec);  // "last used", for kvad cache
        if (hit) *hit = true;
        return gguf_source(std::move(f));
      }
    } catch (const Error&) {
      // A damaged or foreign file: convert again over it.
    }
  }
  if (hit) *hit = false;
  const std::shared_ptr<const TensorSource> src = gguf_split_source(path);
  // Metadata from the first part (gguf_split_source's rule).
  std::shared_ptr<const gguf::File> first = gguf_file(*src);
  if (!first) first = gguf::File::open(gguf_parts(path)[0]);
  std::vector<quant::InputTensor> tensors;
  std::vector<quant::TensorDesc> descs;
  for (const SourceTensor& t : src->tensors()) {
    require_supported(t);
    tensors.push_back(input_of(t));
    descs.push_back({t.name, tensors.back().ne, t.type});
  }
  const std::string arch = src->get_string("general.architecture", "");
  const std::vector<quant::TensorChoice> plan =
      quant::plan(descs, type, src->get_int(arch + ".block_count", 0), /*allow_requantize=*/true);
  std::vector<gguf::Value> meta;
  for (const gguf::Value& v : first->metadata())
    if (v.key().rfind("split.", 0) != 0 && v.key().rfind("kvad.source.", 0) != 0 && v.key().rfind("kvad.cache.", 0) != 0)
      meta.push_back(v);
  meta.push_back(gguf::make_string(keys::kRepo, fs::absolute(path, ec).string()));
  meta.push_back(gguf::make_string(keys::kCommit, quantize_once_hash(stamp)));
  meta.push_back(gguf::make_string(keys::kFile, stamp));
  meta.push_back(gguf::make_string(keys::kQuant, type.name));
  meta.push_back(gguf::make_uint(keys::kVersion, gguf::ValueType::UINT32, kCacheVersion));
  fs::create_directories(cache_dir, ec);
  if (ec) throw Error("cannot create the quantize-once cache " + cache_dir + ": " + ec.message());
  quant::Options opt;  // all cores
  quant::quantize_tensors(first->version(), meta, tensors, plan, type.file_type, out, opt, path);
  return gguf_source(gguf::File::open(out));
}

}  // namespace kvad
