// The quantize-once cache (model/hf.h quantize_once).
#include <cctype>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/quantize.h"
#include "io/tensor_source.h"
#include "model/hf.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

namespace fs = std::filesystem;

namespace {

namespace keys = quantize_once_keys;

// Bump when the file's layout or rules change. 2: the tokenizer's keys.
constexpr int64_t kCacheVersion = 2;

std::string safe(const std::string& s) {
  std::string o;
  for (char c : s) o += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ? c : '-';
  return o;
}

std::vector<gguf::Value> gguf_metadata(const Metadata& md) {
  std::vector<gguf::Value> v;
  for (const auto& [key, val] : md) {
    if (key == "kvad.rope.neox") continue;  // rows are permuted to GGUF's layout below
    if (const int64_t* i = std::get_if<int64_t>(&val)) {
      // GGUF's llama.cpp readers take the dims as uint32.
      v.push_back(*i >= 0 && *i <= UINT32_MAX ? gguf::make_uint(key, gguf::ValueType::UINT32, static_cast<uint64_t>(*i))
                                              : gguf::make_int(key, gguf::ValueType::INT64, *i));
    } else if (const double* d = std::get_if<double>(&val)) {
      v.push_back(gguf::make_float(key, gguf::ValueType::FLOAT32, *d));
    } else if (const std::vector<bool>* b = std::get_if<std::vector<bool>>(&val)) {
      v.push_back(gguf::make_uint_array(key, gguf::ValueType::BOOL, std::vector<uint64_t>(b->begin(), b->end())));
    } else {
      v.push_back(gguf::make_string(key, std::get<std::string>(val)));
    }
  }
  return v;
}

// GGUF llama files store each head's Q/K rows interleaved for adjacent-pair
// RoPE: GGUF row 2i + half of a head is HF row half · D/2 + i (llama.cpp's
// convert_hf_to_gguf permute()).
std::vector<int64_t> qk_rows(int64_t n_rows, int64_t n_head) {
  std::vector<int64_t> m(n_rows);
  const int64_t D = n_rows / n_head;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < D / 2; ++i)
      for (int64_t half = 0; half < 2; ++half) m[h * D + 2 * i + half] = h * D + half * (D / 2) + i;
  return m;
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
  (void)quant::find_quant_type(quant);
  if (auto c = cached(*open_hf_checkpoint(dir, /*list_only=*/true), key, quantize_once_path(key, quant))) {
    if (hit) *hit = true;
    return c;
  }
  return quantize_once(open_hf_checkpoint(dir), quant, key, hit);
}

std::shared_ptr<const TensorSource> quantize_once(std::shared_ptr<const TensorSource> hf, const std::string& quant,
                                                  const QuantizeOnceKey& key, bool* hit) {
  const quant::QuantType& type = quant::find_quant_type(quant);
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
  const bool neox = hf->get_int("kvad.rope.neox", 0) != 0;
  const int64_t n_head = hf->get_int(arch + ".attention.head_count", 0);
  const int64_t n_head_kv = hf->get_int(arch + ".attention.head_count_kv", n_head);
  std::vector<quant::TensorDesc> descs;
  std::vector<quant::InputTensor> in;
  for (const SourceTensor& t : hf->tensors()) {
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + std::max(1, t.n_dims));
    descs.push_back({t.name, ne, t.type});
    quant::InputTensor it{t.name, t.type, ne, static_cast<const uint8_t*>(t.data), t.n_bytes, {}};
    if (neox && arch == "llama" && (t.name.ends_with("attn_q.weight") || t.name.ends_with("attn_k.weight"))) {
      const int64_t heads = t.name.ends_with("attn_q.weight") ? n_head : n_head_kv;
      it.row_map = qk_rows(t.ne[1], heads);
    }
    in.push_back(std::move(it));
  }
  const std::vector<quant::TensorChoice> plan = quant::plan(descs, type, hf->get_int(arch + ".block_count", 0));
  std::vector<gguf::Value> meta = gguf_metadata(*md);
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
  quant::quantize_tensors(3, meta, in, plan, type.file_type, path, opt, hf->path());
  return gguf_source(gguf::File::open(path));
}

}  // namespace kvad
