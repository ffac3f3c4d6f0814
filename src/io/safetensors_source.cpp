// safetensors_source (declared in io/tensor_source.h): a safetensors file or
// a sharded checkpoint directory as a TensorSource, tensors by their
// checkpoint names as stored.
#include <filesystem>
#include <map>

#include "io/safetensors.h"
#include "io/tensor_source.h"

namespace kvad {
namespace {

namespace fs = std::filesystem;
namespace st = safetensors;

using Files = std::vector<std::unique_ptr<st::File>>;

SourceTensor to_source(const st::TensorInfo& ti, const std::string& origin) {
  SourceTensor t;
  t.name = ti.name;
  t.origin = origin;
  t.data = ti.data;
  t.n_bytes = ti.n_bytes;
  t.stored_dtype = st::dtype_name(ti.dtype);
  t.shape = ti.shape;
  switch (ti.dtype) {
    case st::Dtype::F32: t.type = DType::F32; break;
    case st::Dtype::F16: t.type = DType::F16; break;
    case st::Dtype::BF16: t.type = DType::BF16; break;
    case st::Dtype::I8: t.type = DType::I8; break;
    case st::Dtype::I32: t.type = DType::I32; break;
    case st::Dtype::I64: t.type = DType::I64; break;
    case st::Dtype::U8:
    case st::Dtype::F8_E4M3:
    case st::Dtype::F8_E5M2:
      // No kvad format: a 1-byte stand-in keeps row_bytes(type, ne) == n_bytes.
      t.type = DType::I8;
      t.supported = false;
      break;
  }
  // safetensors shapes are row-major, outermost first; ggml's ne is the
  // reverse (ne[0] the contiguous dim).
  const size_t rank = ti.shape.size();
  t.n_dims = rank == 0 ? 1 : static_cast<int>(std::min<size_t>(rank, 4));
  for (size_t i = 0; i < rank && i < 4; ++i) t.ne[i] = ti.shape[rank - 1 - i];
  if (rank > 4) {
    t.supported = false;
    int64_t outer = 1;
    for (size_t i = 0; i + 3 < rank; ++i)
      if (__builtin_mul_overflow(outer, ti.shape[i], &outer)) outer = 0;  // only with a 0 dim elsewhere
    t.ne[3] = outer;
  }
  return t;
}

class SafetensorsSource final : public TensorSource {
 public:
  SafetensorsSource(std::string path, std::shared_ptr<const Files> files, std::vector<SourceTensor> tensors)
      : path_(std::move(path)), files_(std::move(files)), tensors_(std::move(tensors)) {
    for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  }
  const std::string& path() const override { return path_; }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const SourceTensor* find(std::string_view name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  std::shared_ptr<const void> keepalive() const override { return files_; }
  // No metadata: hyper-parameters come from config.json (a later layer).
  bool has(std::string_view) const override { return false; }
  int64_t get_int(std::string_view, int64_t def) const override { return def; }
  int64_t require_int(std::string_view key) const override {
    throw Error(path_ + ": no metadata key " + std::string(key) +
                " (a safetensors checkpoint carries none; hyper-parameters are in config.json)");
  }
  double get_float(std::string_view, double def) const override { return def; }
  std::string get_string(std::string_view, const std::string& def) const override { return def; }

 private:
  std::string path_;
  std::shared_ptr<const Files> files_;
  std::vector<SourceTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

std::shared_ptr<const TensorSource> single(const std::string& shown, const std::string& file) {
  auto files = std::make_shared<Files>();
  files->push_back(st::File::open(file));
  std::vector<SourceTensor> tensors;
  for (const st::TensorInfo& ti : files->front()->tensors()) tensors.push_back(to_source(ti, file));
  return std::make_shared<SafetensorsSource>(shown, std::move(files), std::move(tensors));
}

std::shared_ptr<const TensorSource> sharded(const std::string& shown, const std::string& index_path) {
  const st::Index idx = st::read_index(index_path);
  const fs::path dir = fs::path(index_path).parent_path();
  auto files = std::make_shared<Files>();
  std::vector<SourceTensor> tensors;
  for (const std::string& shard : idx.shards) {
    // parse_index has made sure `shard` is a plain file name, so this path
    // stays in `dir` (a symlink, as in the HF cache's snapshots, is followed).
    const std::string file = (dir / shard).string();
    try {
      files->push_back(st::File::open(file));
    } catch (const SafetensorsError&) {
      throw;  // names the shard file and what is wrong in it
    } catch (const Error& e) {
      throw Error(index_path + ": weight_map names shard \"" + shard + "\", which cannot be read: " + e.what());
    }
    const st::File& f = *files->back();
    for (const st::TensorInfo& ti : f.tensors()) {
      auto it = idx.weight_map.find(ti.name);
      if (it == idx.weight_map.end())
        throw SafetensorsError(file + ": tensor " + ti.name + " is not in the weight_map of " + index_path);
      if (it->second != shard)
        throw SafetensorsError(file + ": tensor " + ti.name + " is in shard \"" + shard + "\", but the weight_map of " +
                               index_path + " puts it in \"" + it->second + "\"");
      tensors.push_back(to_source(ti, file));
    }
  }
  // Every tensor of a shard is in the map under that shard, so the counts are
  // equal exactly when every entry of the map was found in its shard.
  if (tensors.size() != idx.weight_map.size()) {
    std::map<std::string, const st::File*> by_name;
    for (size_t i = 0; i < idx.shards.size(); ++i) by_name.emplace(idx.shards[i], (*files)[i].get());
    for (const auto& [name, shard] : idx.weight_map)
      if (!by_name.at(shard)->find(name))
        throw SafetensorsError(index_path + ": weight_map[\"" + name + "\"] names shard \"" + shard +
                               "\", which has no tensor " + name);
  }
  return std::make_shared<SafetensorsSource>(shown, std::move(files), std::move(tensors));
}

}  // namespace

std::shared_ptr<const TensorSource> safetensors_source(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    // transformers prefers the single file when both are present.
    if (fs::exists(dir / "model.safetensors", ec)) return single(path, (dir / "model.safetensors").string());
    if (fs::exists(dir / "model.safetensors.index.json", ec))
      return sharded(path, (dir / "model.safetensors.index.json").string());
    throw Error(path + ": a directory with neither model.safetensors nor model.safetensors.index.json");
  }
  // diffusers names a variant's index NAME.safetensors.index.<variant>.json.
  const std::string file = fs::path(path).filename().string();
  if (path.ends_with(".index.json") || (file.find(".safetensors.index.") != std::string::npos && path.ends_with(".json")))
    return sharded(path, path);
  return single(path, path);
}

}  // namespace kvad
