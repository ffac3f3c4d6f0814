#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "base/mapped_file.h"

namespace kvad::safetensors {
namespace {

// nlohmann::json (std::map objects), not ordered_json: ordered_json inserts a
// key by a linear search, quadratic in a header of many tensors. Entries are
// therefore checked in key order, and the first bad one by name is reported.
using Json = nlohmann::json;

constexpr int kMaxDepth = 16;

struct DtypeRow {
  Dtype dtype;
  const char* name;
  size_t size;
};
constexpr DtypeRow kDtypes[] = {
    {Dtype::F32, "F32", 4},         {Dtype::F16, "F16", 2}, {Dtype::BF16, "BF16", 2},
    {Dtype::I8, "I8", 1},           {Dtype::U8, "U8", 1},   {Dtype::I32, "I32", 4},
    {Dtype::I64, "I64", 8},         {Dtype::F8_E4M3, "F8_E4M3", 1},
    {Dtype::F8_E5M2, "F8_E5M2", 1},
};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError(path + ": " + what);
}

std::string jq(std::string_view s) {
  // Names come from the file: dump() escapes control bytes so a message
  // stays one printable line.
  std::string q = Json(std::string(s.substr(0, 200))).dump(-1, ' ', true, Json::error_handler_t::replace);
  return s.size() > 200 ? q + "..." : q;
}

// nlohmann's messages quote the token last read, which may be the rest of
// a 100 MB header.
std::string cut(std::string s) {
  if (s.size() > 240) s = s.substr(0, 236) + "...";
  return s;
}

// A first, SAX pass over JSON text for what nlohmann's DOM parser does not
// check: duplicate keys in any object (the DOM keeps one silently), and
// nesting depth. It also reports syntax errors with their byte offset. (The
// DOM parser's callback could see keys too, but nlohmann 3.11 scans the
// parent object on every object_end with a callback: quadratic.)
class Checker {
 public:
  Checker(const std::string& path, const char* what, uint64_t base) : path_(path), what_(what), base_(base) {}
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const std::string&) { return true; }
  bool string(std::string&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(size_t) {
    push();
    keys_.emplace_back();
    return true;
  }
  bool key(std::string& k) {
    if (!keys_.back().insert(k).second) fail(path_, what_ + ": duplicate key " + jq(k));
    return true;
  }
  bool end_object() {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(size_t) {
    push();
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }
  bool parse_error(size_t position, const std::string&, const nlohmann::json::exception& e) {
    // position counts characters read, the bad one included.
    const uint64_t at = position > 0 ? position - 1 : 0;
    fail(path_, what_ + " is not valid JSON at byte " + std::to_string(base_ + at) + ": " + cut(e.what()));
  }

 private:
  void push() {
    if (++depth_ > kMaxDepth) fail(path_, what_ + " nests deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  const std::string& path_;
  std::string what_;
  uint64_t base_;
  int depth_ = 0;
  std::vector<std::unordered_set<std::string>> keys_;  // per open object, its keys so far
};

// Parses JSON text after Checker's pass. Errors name `what` ("header",
// "index") and, for syntax errors, the byte offset `base` + position.
Json parse_json(std::string_view text, const std::string& path, const char* what, uint64_t base) {
  // nlohmann's lexer takes a NUL byte for the end of the input, so text
  // after one would be ignored; JSON has no raw NUL anywhere.
  if (const size_t z = text.find('\0'); z != std::string_view::npos)
    fail(path, std::string(what) + " is not valid JSON: a NUL byte at byte " + std::to_string(base + z));
  Checker c(path, what, base);
  Json::sax_parse(text.begin(), text.end(), &c);
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {  // not expected after the checker's pass
    fail(path, std::string(what) + " is not valid JSON: " + cut(e.what()));
  }
}

const char* json_type(const Json& j) { return j.type_name(); }

// A JSON value for a message, cut to a line's length (a value from the file
// may be megabytes long).
std::string brief(const Json& j) {
  std::string s = j.dump(-1, ' ', true, Json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 60) + "...";
  return s;
}

}  // namespace

const char* dtype_name(Dtype d) {
  for (const DtypeRow& r : kDtypes)
    if (r.dtype == d) return r.name;
  return "?";
}

size_t dtype_size(Dtype d) {
  for (const DtypeRow& r : kDtypes)
    if (r.dtype == d) return r.size;
  return 0;
}

std::unique_ptr<File> File::open(const std::string& path) {
  auto map = std::make_unique<MappedFile>(path);
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  f->data_ = map->data();
  f->size_ = map->size();
  f->map_ = std::move(map);
  f->parse_header();
  return f;
}

std::unique_ptr<File> File::parse(const uint8_t* data, size_t size, std::string name) {
  std::unique_ptr<File> f(new File());
  f->path_ = std::move(name);
  f->data_ = data;
  f->size_ = size;
  f->parse_header();
  return f;
}

File::~File() = default;

const TensorInfo* File::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void File::parse_header() {
  const std::string& p = path_;
  if (size_ < 8)
    fail(p, "file is " + std::to_string(size_) + " bytes, shorter than the 8-byte header length at offset 0");
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | data_[k];
  if (n > kMaxHeaderBytes)
    fail(p, "header length " + std::to_string(n) + " at offset 0 exceeds the limit of " +
                std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > size_ - 8)
    fail(p, "header length " + std::to_string(n) + " at offset 0 runs past the end of the file (" +
                std::to_string(size_) + " bytes)");
  header_bytes_ = n;
  if (n == 0 || data_[8] != '{') fail(p, "header at offset 8 does not begin with '{'");
  const std::string_view text(reinterpret_cast<const char*>(data_ + 8), n);
  const Json j = parse_json(text, p, "header", 8);
  if (!j.is_object()) fail(p, std::string("header is a JSON ") + json_type(j) + ", not an object");

  const uint64_t data_size = size_ - 8 - n;
  const uint8_t* base = data_ + 8 + n;
  for (const auto& [key, v] : j.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) fail(p, std::string("__metadata__ is a JSON ") + json_type(v) + ", not an object of strings");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string())
          fail(p, "__metadata__[" + jq(mk) + "] is a JSON " + json_type(mv) + ", not a string");
        metadata_.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    const std::string t = "tensor " + jq(key);
    if (!v.is_object()) fail(p, t + " is a JSON " + json_type(v) + ", not an object");
    TensorInfo ti;
    ti.name = key;

    auto dt = v.find("dtype");
    if (dt == v.end()) fail(p, t + ": missing field dtype");
    if (!dt->is_string()) fail(p, t + ": dtype is a JSON " + json_type(*dt) + ", not a string");
    const std::string& dname = dt->get_ref<const std::string&>();
    const DtypeRow* row = nullptr;
    for (const DtypeRow& r : kDtypes)
      if (dname == r.name) row = &r;
    if (!row)
      fail(p, t + ": dtype " + jq(dname) +
                  " is not one kvad reads (F32, F16, BF16, I8, U8, I32, I64, F8_E4M3, F8_E5M2)");
    ti.dtype = row->dtype;

    auto sh = v.find("shape");
    if (sh == v.end()) fail(p, t + ": missing field shape");
    if (!sh->is_array()) fail(p, t + ": shape is a JSON " + json_type(*sh) + ", not an array");
    uint64_t elems = 1;
    bool overflow = false;
    for (size_t i = 0; i < sh->size(); ++i) {
      const Json& d = (*sh)[i];
      const std::string at = t + ": shape[" + std::to_string(i) + "]";
      if (!d.is_number_unsigned()) fail(p, at + " is " + brief(d) + ", not a non-negative integer");
      const uint64_t dv = d.get<uint64_t>();
      if (dv > static_cast<uint64_t>(INT64_MAX)) fail(p, at + " = " + std::to_string(dv) + " is too large");
      ti.shape.push_back(static_cast<int64_t>(dv));
      // A dim of 0 makes the product 0 whatever follows, but the other dims
      // are still read and checked one by one.
      if (!overflow && __builtin_mul_overflow(elems, dv, &elems)) overflow = true;
    }
    if (overflow) {
      // An overflowing product with a 0 dim is still 0 elements.
      if (std::find(ti.shape.begin(), ti.shape.end(), 0) == ti.shape.end())
        fail(p, t + ": shape " + brief(*sh) + " has more elements than 2^64");
      elems = 0;
    }
    uint64_t bytes = 0;
    if (elems > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(elems, row->size, &bytes))
      fail(p, t + ": shape " + brief(*sh) + " of " + row->name + " is more than 2^63 bytes");
    ti.n_elements = static_cast<int64_t>(elems);

    auto off = v.find("data_offsets");
    if (off == v.end()) fail(p, t + ": missing field data_offsets");
    if (!off->is_array() || off->size() != 2)
      fail(p, t + ": data_offsets is " + brief(*off) + ", not an array of two integers");
    for (size_t i = 0; i < 2; ++i)
      if (!(*off)[i].is_number_unsigned())
        fail(p, t + ": data_offsets[" + std::to_string(i) + "] is " + brief((*off)[i]) +
                    ", not a non-negative integer");
    ti.begin = (*off)[0].get<uint64_t>();
    ti.end = (*off)[1].get<uint64_t>();
    const std::string range = "data_offsets [" + std::to_string(ti.begin) + ", " + std::to_string(ti.end) + "]";
    if (ti.begin > ti.end) fail(p, t + ": " + range + " ends before it begins");
    if (ti.end > data_size)
      fail(p, t + ": " + range + " runs past the end of the data (" + std::to_string(data_size) +
                  " bytes from file offset " + std::to_string(data_offset()) + ")");
    if (ti.end - ti.begin != bytes)
      fail(p, t + ": " + range + " hold " + std::to_string(ti.end - ti.begin) + " bytes, but shape " + brief(*sh) +
                  " of " + row->name + " needs " + std::to_string(bytes));
    ti.data = base + ti.begin;
    ti.n_bytes = static_cast<size_t>(bytes);
    tensors_.push_back(std::move(ti));
  }

  // The data must be tiled exactly: sorted by offset, each tensor begins
  // where the previous one ended (empty tensors may share an offset), and the
  // last ends at the end of the file. This rules out overlaps (two names for
  // the same bytes) and holes (bytes no tensor accounts for).
  std::stable_sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& ti : tensors_) {
    if (ti.begin < pos)
      fail(p, "tensor " + jq(ti.name) + " (data_offsets [" + std::to_string(ti.begin) + ", " +
                  std::to_string(ti.end) + "]) overlaps tensor " + jq(prev->name) + " (data_offsets [" +
                  std::to_string(prev->begin) + ", " + std::to_string(prev->end) + "])");
    if (ti.begin > pos)
      fail(p, "data bytes [" + std::to_string(pos) + ", " + std::to_string(ti.begin) + ") (file offset " +
                  std::to_string(data_offset() + pos) + ") belong to no tensor; tensor " + jq(ti.name) +
                  " begins after them");
    pos = ti.end;
    prev = &ti;
  }
  if (pos != data_size)
    fail(p, "data bytes [" + std::to_string(pos) + ", " + std::to_string(data_size) + ") (file offset " +
                std::to_string(data_offset() + pos) + ") after the last tensor belong to no tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

bool is_plain_file_name(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  return name.find_first_of(std::string_view("/\\\0", 3)) == std::string_view::npos;
}

Index parse_index(std::string_view json_text, const std::string& path) {
  const Json j = parse_json(json_text, path, "index", 0);
  if (!j.is_object()) fail(path, std::string("index is a JSON ") + json_type(j) + ", not an object");
  if (auto m = j.find("metadata"); m != j.end() && !m->is_object() && !m->is_null())
    fail(path, std::string("metadata is a JSON ") + json_type(*m) + ", not an object");
  auto wm = j.find("weight_map");
  if (wm == j.end()) fail(path, "missing field weight_map");
  if (!wm->is_object()) fail(path, std::string("weight_map is a JSON ") + json_type(*wm) + ", not an object");
  Index idx;
  for (const auto& [tensor, shard] : wm->items()) {
    const std::string at = "weight_map[" + jq(tensor) + "]";
    if (!shard.is_string()) fail(path, at + " is a JSON " + json_type(shard) + ", not a file name");
    const std::string& s = shard.get_ref<const std::string&>();
    if (!is_plain_file_name(s))
      fail(path, at + " = " + jq(s) +
                     " is not a plain file name in the checkpoint's directory (no '/', '\\', '..', empty names)");
    idx.weight_map.emplace(tensor, s);
    idx.shards.push_back(s);
  }
  std::sort(idx.shards.begin(), idx.shards.end());
  idx.shards.erase(std::unique(idx.shards.begin(), idx.shards.end()), idx.shards.end());
  return idx;
}

Index read_index(const std::string& path) {
  // Read through a mapping: it refuses directories and names the path.
  MappedFile m(path);
  if (m.size() > kMaxHeaderBytes)
    fail(path, "index is " + std::to_string(m.size()) + " bytes, more than the limit of " +
                   std::to_string(kMaxHeaderBytes));
  return parse_index(std::string_view(reinterpret_cast<const char*>(m.data()), m.size()), path);
}

}  // namespace kvad::safetensors
