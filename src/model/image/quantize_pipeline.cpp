#include "model/image/quantize_pipeline.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/quantize.h"
#include "io/tensor_source.h"
#include "model/quantize_once.h"

namespace kvad::image {

namespace fs = std::filesystem;
namespace keys = quantize_once_keys;

namespace {

// Bump when the entry's layout or rule changes.
constexpr int64_t kPipelineCacheVersion = 1;

std::string stem_of(const std::string& path) {
  fs::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // a trailing '/'
  return p.extension() == ".safetensors" ? p.stem().string() : p.filename().string();
}

std::string tensor_stamp(const TensorSource& s) {
  std::string out;
  for (const SourceTensor& t : s.tensors()) out += t.name + ":" + dtype_name(t.type) + ";";
  return out;
}

bool float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

DType quant_dtype(const std::string& quant) {
  check_pipeline_quant(quant);
  return DType::Q8_0;
}

}  // namespace

const std::vector<std::string>& pipeline_quant_types() {
  static const std::vector<std::string> types{"q8_0"};
  return types;
}

void check_pipeline_quant(const std::string& quant) {
  const std::vector<std::string>& ok = pipeline_quant_types();
  if (std::find(ok.begin(), ok.end(), quant) != ok.end()) return;
  std::string list;
  for (const std::string& t : ok) list += (list.empty() ? "" : ", ") + t;
  throw Error("--quant '" + quant + "' is not a type image pipelines take (" + list +
              ": the UNet's and text encoders' linears and convolutions)");
}

bool quantized_in_pipeline(const std::string& name, const std::vector<int64_t>& ne) {
  const bool part = name.starts_with("unet.") || name.starts_with("text_encoder.") || name.starts_with("text_encoder_2.");
  if (!part || !name.ends_with(".weight") || name.find(".embeddings.") != std::string::npos) return false;
  if (ne.size() == 2) return ne[1] > 1 && ne[0] % 32 == 0;  // [n_out, n_in]: rows of n_in
  if (ne.size() == 4) return ne[2] % 32 == 0;                // [OC, C, KH, KW]: rows of C after the permute
  return false;
}

std::string quantize_pipeline_path(const Pipeline& pl, const std::string& quant, const std::string& cache_dir) {
  check_pipeline_quant(quant);
  return quantize_once_entry_path(cache_dir, stem_of(pl.path), quantize_once_file_stamp(pl.weight_files), quant,
                                  kPipelineCacheVersion);
}

std::shared_ptr<const TensorSource> quantize_pipeline_once(const Pipeline& pl, const std::string& quant,
                                                           const std::string& cache_dir, bool* hit) {
  const DType qt = quant_dtype(quant);
  if (!pl.weights) throw Error(pl.path + ": the pipeline has no weights to quantize");
  const std::string fstamp = quantize_once_file_stamp(pl.weight_files), tstamp = tensor_stamp(*pl.weights);
  const std::string path = quantize_once_entry_path(cache_dir, stem_of(pl.path), fstamp, quant, kPipelineCacheVersion);
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    try {
      std::shared_ptr<const gguf::File> f = gguf::File::open(path);
      if (f->get_string(keys::kFile, "") == fstamp && f->get_string(keys::kTensors, "") == tstamp &&
          f->get_string(keys::kQuant, "") == quant && f->get_int(keys::kVersion, 0) == kPipelineCacheVersion) {
        fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // "last used", for kvad cache
        if (hit) *hit = true;
        return gguf_source(std::move(f));
      }
    } catch (const Error&) {
      // A damaged or foreign file: quantize again over it.
    }
  }
  if (hit) *hit = false;

  std::vector<quant::InputTensor> tensors;
  std::vector<quant::TensorChoice> plan;
  for (const SourceTensor& t : pl.weights->tensors()) {
    require_supported(t);
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + std::max(1, t.n_dims));
    quant::InputTensor it{t.name, t.type, ne, static_cast<const uint8_t*>(t.data), t.n_bytes, {}, {}};
    quant::TensorChoice c;
    c.type = c.wanted = t.type;
    if (float_type(t.type) && quantized_in_pipeline(t.name, ne)) {
      c.quantize = true;
      c.type = c.wanted = qt;
      if (ne.size() == 4) {
        // torch [OC, C, KH, KW] (ne {KW, KH, C, OC}) -> conv2d's {C, KW, KH, OC}:
        // row (oc, ky, kx) holds the C values w[oc, :, ky, kx].
        const int64_t KW = ne[0], KH = ne[1], C = ne[2], OC = ne[3];
        it.ne = {C, KW, KH, OC};
        if (KW * KH > 1) {
          const size_t es = dtype_info(t.type).block_bytes;
          const uint8_t* base = it.data;
          it.fill = [=](int64_t r0, int64_t n, uint8_t* dst) {
            for (int64_t r = r0; r < r0 + n; ++r) {
              const int64_t oc = r / (KH * KW), k = r % (KH * KW);  // k = ky · KW + kx
              const uint8_t* src = base + static_cast<size_t>(oc * C * KH * KW + k) * es;
              for (int64_t ch = 0; ch < C; ++ch, dst += es) std::memcpy(dst, src + static_cast<size_t>(ch * KH * KW) * es, es);
            }
          };
        }
      }
    }
    tensors.push_back(std::move(it));
    plan.push_back(c);
  }
  std::vector<gguf::Value> meta;
  meta.push_back(gguf::make_string("general.architecture", "kvad-image-pipeline"));
  meta.push_back(gguf::make_string("general.name", stem_of(pl.path)));
  meta.push_back(gguf::make_string("kvad.image.pipeline_class", pipeline_class_name(pl.pipeline_class)));
  meta.push_back(gguf::make_string(keys::kRepo, fs::absolute(pl.path, ec).string()));
  meta.push_back(gguf::make_string(keys::kCommit, quantize_once_hash(fstamp)));
  meta.push_back(gguf::make_string(keys::kFile, fstamp));
  meta.push_back(gguf::make_string(keys::kTensors, tstamp));
  meta.push_back(gguf::make_string(keys::kQuant, quant));
  meta.push_back(gguf::make_uint(keys::kVersion, gguf::ValueType::UINT32, kPipelineCacheVersion));
  fs::create_directories(cache_dir, ec);
  if (ec) throw Error("cannot create the quantize-once cache " + cache_dir + ": " + ec.message());
  quant::Options opt;  // all cores
  quant::quantize_tensors(3, meta, tensors, plan, quant::find_quant_type(quant).file_type, path, opt, pl.path);
  return gguf_source(gguf::File::open(path));
}

}  // namespace kvad::image
