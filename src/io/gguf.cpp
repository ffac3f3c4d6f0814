// GGUF reader (versions 2 and 3). Source: ggml/docs/gguf.md.
//
// The parser walks the bytes with a bounds-checked cursor: every read first
// checks that the bytes are there, and every count read from the file is
// checked against the bytes left *before* anything is allocated for it, so a
// small file can never make the reader allocate much more than its own size.
// All integers are assembled byte by byte from little-endian, so the reader
// is also correct on a big-endian host.
#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <new>

#include "base/mapped_file.h"

namespace kvad::gguf {

namespace {

// Arrays of arrays are legal; nesting deeper than this is refused so that a
// hostile file cannot exhaust the stack. No real file nests at all.
constexpr int kMaxArrayDepth = 16;

// Smallest possible encodings, used to bound counts before allocating.
constexpr size_t kMinKvBytes = 8 + 4 + 1;              // key length, type, 1-byte value
constexpr size_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, ne[0], type, offset
constexpr uint32_t kMaxDims = 4;                       // GGML_MAX_DIMS

// kvad's own limits, far above any real file (the largest vocabularies have
// ~260k tokens, real files < 200 metadata pairs). They keep a corrupt count in
// a multi-GB model file from turning into a multi-GB allocation: numeric
// arrays are stored widened to 8 bytes per element.
constexpr uint64_t kMaxArrayElems = uint64_t{1} << 25;
constexpr uint64_t kMaxKv = uint64_t{1} << 20;
// Vectors are reserved up to this many entries and grow as entries are
// actually read, so memory follows the bytes parsed, not the counts claimed.
constexpr size_t kMaxReserve = size_t{1} << 16;

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

// Bytes of one element on disk; for STRING and ARRAY the smallest encoding.
size_t min_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: return 8;
    case ValueType::ARRAY: return 4 + 8;
  }
  return 1;
}

bool is_unsigned(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 ||
         t == ValueType::UINT64;
}
bool is_signed(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}
bool is_float(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

std::string quote(std::string_view s) {
  // Keys and names come from the file; keep messages one printable line.
  std::string out = "'";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
    if (out.size() > 200) { out += "..."; break; }
  }
  out += "'";
  return out;
}

// Bounds-checked little-endian cursor over the file's bytes.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& file)
      : data_(data), size_(size), file_(file) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  /// Throws GGUFError "<file>: <ctx>: <msg> at offset <at>".
  [[noreturn]] void fail(size_t at, const std::string& ctx, const std::string& msg) const {
    std::string m = file_ + ": ";
    if (!ctx.empty()) m += ctx + ": ";
    m += msg + " at offset " + std::to_string(at);
    throw GGUFError(m);
  }

  void need(size_t n, const std::string& ctx, const char* field) const {
    if (n > remaining())
      fail(pos_, ctx, std::string("truncated ") + field + ": need " + std::to_string(n) +
                          " bytes, " + std::to_string(remaining()) + " left");
  }

  uint64_t uint(size_t n, const std::string& ctx, const char* field) {
    need(n, ctx, field);
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(data_[pos_ + k]) << (8 * k);
    pos_ += n;
    return v;
  }
  uint8_t u8(const std::string& ctx, const char* f) { return static_cast<uint8_t>(uint(1, ctx, f)); }
  uint16_t u16(const std::string& ctx, const char* f) { return static_cast<uint16_t>(uint(2, ctx, f)); }
  uint32_t u32(const std::string& ctx, const char* f) { return static_cast<uint32_t>(uint(4, ctx, f)); }
  uint64_t u64(const std::string& ctx, const char* f) { return uint(8, ctx, f); }

  void skip(size_t n, const std::string& ctx, const char* field) {
    need(n, ctx, field);
    pos_ += n;
  }

  /// u64 length + bytes. The length is checked against the bytes left before
  /// the string is built.
  std::string str(const std::string& ctx, const char* field) {
    size_t at = pos_;
    uint64_t len = u64(ctx, field);
    if (len > remaining())
      fail(at, ctx, std::string("truncated or corrupt ") + field + ": length " + std::to_string(len) +
                        " exceeds the " + std::to_string(remaining()) + " bytes left in the file");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }
  void skip_str(const std::string& ctx, const char* field) {
    size_t at = pos_;
    uint64_t len = u64(ctx, field);
    if (len > remaining())
      fail(at, ctx, std::string("truncated or corrupt ") + field + ": length " + std::to_string(len) +
                        " exceeds the " + std::to_string(remaining()) + " bytes left in the file");
    pos_ += static_cast<size_t>(len);
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& file_;
};

void read_scalar(Cursor& c, ValueType t, Value& v, const std::string& ctx) {
  switch (t) {
    case ValueType::UINT8: v.u_ = c.u8(ctx, "UINT8 value"); break;
    case ValueType::UINT16: v.u_ = c.u16(ctx, "UINT16 value"); break;
    case ValueType::UINT32: v.u_ = c.u32(ctx, "UINT32 value"); break;
    case ValueType::UINT64: v.u_ = c.u64(ctx, "UINT64 value"); break;
    case ValueType::INT8: v.i_ = static_cast<int8_t>(c.u8(ctx, "INT8 value")); break;
    case ValueType::INT16: v.i_ = static_cast<int16_t>(c.u16(ctx, "INT16 value")); break;
    case ValueType::INT32: v.i_ = static_cast<int32_t>(c.u32(ctx, "INT32 value")); break;
    case ValueType::INT64: v.i_ = static_cast<int64_t>(c.u64(ctx, "INT64 value")); break;
    case ValueType::FLOAT32: v.f_ = std::bit_cast<float>(c.u32(ctx, "FLOAT32 value")); break;
    case ValueType::FLOAT64: v.f_ = std::bit_cast<double>(c.u64(ctx, "FLOAT64 value")); break;
    case ValueType::BOOL: v.u_ = c.u8(ctx, "BOOL value") != 0; break;
    case ValueType::STRING: v.s_ = c.str(ctx, "string"); break;
    case ValueType::ARRAY: break;  // handled by the caller
  }
}

// Reads an array header (element type, count) and checks the count fits.
std::pair<ValueType, uint64_t> read_array_header(Cursor& c, const std::string& ctx) {
  size_t at = c.pos();
  uint32_t et = c.u32(ctx, "array element type");
  if (!valid_type(et)) c.fail(at, ctx, "unknown array element type " + std::to_string(et));
  ValueType t = static_cast<ValueType>(et);
  size_t count_at = c.pos();
  uint64_t n = c.u64(ctx, "array length");
  if (n > c.remaining() / min_size(t))
    c.fail(count_at, ctx,
           "array of " + std::to_string(n) + " " + value_type_name(t) + " elements cannot fit in the " +
               std::to_string(c.remaining()) + " bytes left in the file");
  if (n > kMaxArrayElems)
    c.fail(count_at, ctx, "array of " + std::to_string(n) + " elements exceeds kvad's limit of " +
                              std::to_string(kMaxArrayElems));
  return {t, n};
}

// Skips an array whose elements are arrays (parsed for validity, not kept).
void skip_array(Cursor& c, const std::string& ctx, int depth) {
  if (depth > kMaxArrayDepth)
    c.fail(c.pos(), ctx, "arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
  auto [t, n] = read_array_header(c, ctx);
  if (t == ValueType::STRING) {
    for (uint64_t k = 0; k < n; ++k) c.skip_str(ctx, "string in nested array");
  } else if (t == ValueType::ARRAY) {
    for (uint64_t k = 0; k < n; ++k) skip_array(c, ctx, depth + 1);
  } else {
    c.skip(static_cast<size_t>(n) * min_size(t), ctx, "nested array elements");
  }
}

void read_array(Cursor& c, Value& v, const std::string& ctx) {
  auto [t, n] = read_array_header(c, ctx);
  v.array_type_ = t;
  v.n_ = static_cast<size_t>(n);
  const size_t count = static_cast<size_t>(n);  // fits: n <= remaining bytes
  if (is_unsigned(t) || t == ValueType::BOOL) {
    const size_t es = min_size(t);
    c.need(count * es, ctx, "array elements");
    v.uarr_.resize(count);
    for (size_t k = 0; k < count; ++k) {
      uint64_t x = c.uint(es, ctx, "array element");
      v.uarr_[k] = t == ValueType::BOOL ? (x != 0) : x;
    }
  } else if (is_signed(t)) {
    const size_t es = min_size(t);
    c.need(count * es, ctx, "array elements");
    v.iarr_.resize(count);
    for (size_t k = 0; k < count; ++k) {
      uint64_t x = c.uint(es, ctx, "array element");
      int64_t s;
      switch (es) {
        case 1: s = static_cast<int8_t>(x); break;
        case 2: s = static_cast<int16_t>(x); break;
        case 4: s = static_cast<int32_t>(x); break;
        default: s = static_cast<int64_t>(x); break;
      }
      v.iarr_[k] = s;
    }
  } else if (is_float(t)) {
    c.need(count * min_size(t), ctx, "array elements");
    v.farr_.resize(count);
    for (size_t k = 0; k < count; ++k)
      v.farr_[k] = t == ValueType::FLOAT32 ? std::bit_cast<float>(c.u32(ctx, "array element"))
                                           : std::bit_cast<double>(c.u64(ctx, "array element"));
  } else if (t == ValueType::STRING) {
    v.strs_.reserve(std::min(count, kMaxReserve));
    for (size_t k = 0; k < count; ++k) v.strs_.push_back(c.str(ctx, "string array element"));
  } else {  // ARRAY of arrays: validated and skipped
    for (size_t k = 0; k < count; ++k) skip_array(c, ctx, 2);
  }
}

// Checked products for dimensions and sizes.
bool mul_overflow(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }
bool mul_overflow(size_t a, size_t b, size_t* out) { return __builtin_mul_overflow(a, b, out); }

std::string value_error_prefix(const Value& v) {
  std::string m;
  if (!v.file_.empty()) m += v.file_ + ": ";
  m += "key " + quote(v.key_);
  if (!v.file_.empty()) m += " (at offset " + std::to_string(v.offset_) + ")";
  return m + ": ";
}

[[noreturn]] void type_error(const Value& v, const char* expected) {
  std::string got = value_type_name(v.type());
  if (v.type() == ValueType::ARRAY) got += std::string(" of ") + value_type_name(v.array_type());
  throw GGUFError(value_error_prefix(v) + "expected " + expected + ", got " + got);
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "UINT8";
    case ValueType::INT8: return "INT8";
    case ValueType::UINT16: return "UINT16";
    case ValueType::INT16: return "INT16";
    case ValueType::UINT32: return "UINT32";
    case ValueType::INT32: return "INT32";
    case ValueType::FLOAT32: return "FLOAT32";
    case ValueType::BOOL: return "BOOL";
    case ValueType::STRING: return "STRING";
    case ValueType::ARRAY: return "ARRAY";
    case ValueType::UINT64: return "UINT64";
    case ValueType::INT64: return "INT64";
    case ValueType::FLOAT64: return "FLOAT64";
  }
  return "unknown";
}

// ---- Value accessors ----

int64_t Value::as_int() const {
  if (is_signed(type_)) return i_;
  if (is_unsigned(type_)) {
    if (u_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw GGUFError(value_error_prefix(*this) + "value " + std::to_string(u_) +
                      " does not fit in a signed 64-bit integer");
    return static_cast<int64_t>(u_);
  }
  type_error(*this, "an integer");
}

uint64_t Value::as_uint() const {
  if (is_unsigned(type_)) return u_;
  if (is_signed(type_)) {
    if (i_ < 0)
      throw GGUFError(value_error_prefix(*this) + "value " + std::to_string(i_) +
                      " is negative where an unsigned integer is expected");
    return static_cast<uint64_t>(i_);
  }
  type_error(*this, "an unsigned integer");
}

double Value::as_float() const {
  if (is_float(type_)) return f_;
  if (is_unsigned(type_)) return static_cast<double>(u_);
  if (is_signed(type_)) return static_cast<double>(i_);
  type_error(*this, "a number");
}

bool Value::as_bool() const {
  if (type_ == ValueType::BOOL) return u_ != 0;
  type_error(*this, "BOOL");
}

const std::string& Value::as_string() const {
  if (type_ == ValueType::STRING) return s_;
  type_error(*this, "STRING");
}

size_t Value::array_size() const {
  if (type_ == ValueType::ARRAY) return n_;
  type_error(*this, "ARRAY");
}

const std::vector<std::string>& Value::as_string_array() const {
  if (type_ == ValueType::ARRAY && array_type_ == ValueType::STRING) return strs_;
  type_error(*this, "ARRAY of STRING");
}

std::vector<int64_t> Value::as_int_array() const {
  if (type_ == ValueType::ARRAY && is_signed(array_type_)) return iarr_;
  if (type_ == ValueType::ARRAY && (is_unsigned(array_type_) || array_type_ == ValueType::BOOL)) {
    std::vector<int64_t> out(uarr_.size());
    for (size_t k = 0; k < uarr_.size(); ++k) {
      if (uarr_[k] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw GGUFError(value_error_prefix(*this) + "element " + std::to_string(k) + " (" +
                        std::to_string(uarr_[k]) + ") does not fit in a signed 64-bit integer");
      out[k] = static_cast<int64_t>(uarr_[k]);
    }
    return out;
  }
  type_error(*this, "ARRAY of integers");
}

std::vector<float> Value::as_float_array() const {
  if (type_ == ValueType::ARRAY) {
    if (is_float(array_type_)) return std::vector<float>(farr_.begin(), farr_.end());
    if (is_signed(array_type_)) return std::vector<float>(iarr_.begin(), iarr_.end());
    if (is_unsigned(array_type_)) return std::vector<float>(uarr_.begin(), uarr_.end());
  }
  type_error(*this, "ARRAY of numbers");
}

// ---- TensorInfo ----

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // the reader checked this product for overflow
  return n;
}

// ---- File ----

File::~File() = default;

std::unique_ptr<File> File::open(const std::string& path) {
  std::unique_ptr<MappedFile> map;
  try {
    map = std::make_unique<MappedFile>(path);
  } catch (const GGUFError&) {
    throw;
  } catch (const Error& e) {
    throw GGUFError(e.what());  // already starts with the path
  }
  const uint8_t* data = map->data();
  size_t size = map->size();
  auto f = parse(data, size, path);
  f->map_ = std::move(map);
  return f;
}

std::unique_ptr<File> File::parse(const uint8_t* data, size_t size, const std::string& name) {
  try {
    return parse_impl(data, size, name);
  } catch (const std::bad_alloc&) {
    throw GGUFError(name + ": out of memory while reading the metadata and tensor infos");
  }
}

std::unique_ptr<File> File::parse_impl(const uint8_t* data, size_t size, const std::string& name) {
  std::unique_ptr<File> f(new File());
  f->name_ = name;
  f->data_ = data;
  f->size_ = size;
  Cursor c(data, size, f->name_);

  // Header.
  const std::string hdr = "header";
  c.need(4, hdr, "magic");
  if (std::memcmp(data, "GGUF", 4) != 0) {
    std::string got;
    for (int k = 0; k < 4; ++k) {
      char ch = static_cast<char>(data[k]);
      got += (data[k] >= 0x20 && data[k] < 0x7f) ? std::string(1, ch) : "?";
    }
    c.fail(0, hdr, "not a GGUF file: magic is '" + got + "', expected 'GGUF'");
  }
  c.skip(4, hdr, "magic");
  size_t at = c.pos();
  uint32_t version = c.u32(hdr, "version");
  if (version != 2 && version != 3) {
    if ((version & 0xFFFFu) == 0 && (version >> 16) != 0)
      c.fail(at, hdr, "version field reads " + std::to_string(version) +
                          ": a big-endian GGUF file, which kvad does not read");
    c.fail(at, hdr, "unsupported GGUF version " + std::to_string(version) + " (kvad reads versions 2 and 3)");
  }
  f->version_ = version;
  size_t tc_at = c.pos();
  uint64_t n_tensors = c.u64(hdr, "tensor count");
  size_t kc_at = c.pos();
  uint64_t n_kv = c.u64(hdr, "metadata count");
  if (n_kv > c.remaining() / kMinKvBytes)
    c.fail(kc_at, hdr, "metadata count " + std::to_string(n_kv) + " cannot fit in the " +
                           std::to_string(c.remaining()) + " bytes left in the file");
  if (n_tensors > c.remaining() / kMinTensorInfoBytes)
    c.fail(tc_at, hdr, "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                           std::to_string(c.remaining()) + " bytes left in the file");

  if (n_kv > kMaxKv)
    c.fail(kc_at, hdr, "metadata count " + std::to_string(n_kv) + " exceeds kvad's limit of " +
                           std::to_string(kMaxKv));

  // Metadata.
  f->kv_.reserve(std::min(static_cast<size_t>(n_kv), kMaxReserve));
  for (uint64_t i = 0; i < n_kv; ++i) {
    size_t kv_at = c.pos();
    std::string key = c.str("metadata pair #" + std::to_string(i), "key");
    const std::string ctx = "key " + quote(key);
    size_t type_at = c.pos();
    uint32_t t = c.u32(ctx, "value type");
    if (!valid_type(t)) c.fail(type_at, ctx, "unknown value type " + std::to_string(t));
    Value v;
    v.key_ = std::move(key);
    v.type_ = static_cast<ValueType>(t);
    v.file_ = f->name_;
    v.offset_ = kv_at;
    if (v.type_ == ValueType::ARRAY)
      read_array(c, v, ctx);
    else
      read_scalar(c, v.type_, v, ctx);
    auto [it, inserted] = f->kv_index_.try_emplace(v.key_, f->kv_.size());
    if (!inserted)
      c.fail(kv_at, ctx, "duplicate metadata key (first defined at offset " +
                             std::to_string(f->kv_[it->second].offset_) + ")");
    f->kv_.push_back(std::move(v));
  }

  // Alignment.
  if (const Value* a = f->find("general.alignment")) {
    const std::string ctx = "key 'general.alignment'";
    if (a->type() != ValueType::UINT32)
      c.fail(a->offset_, ctx, std::string("must be UINT32, is ") + value_type_name(a->type()));
    if (a->u_ == 0 || !std::has_single_bit(a->u_))
      c.fail(a->offset_, ctx, "alignment " + std::to_string(a->u_) + " is not a nonzero power of two");
    f->alignment_ = static_cast<size_t>(a->u_);
  }

  // Tensor infos. The count was bounded by the file size above; a count that
  // the bytes left after the metadata cannot hold fails below as a truncated
  // tensor info (naming it), and each info consumes at least 32 bytes, so the
  // vectors never grow beyond the file's size.
  const size_t nt = static_cast<size_t>(n_tensors);
  const size_t reserve = std::min({nt, c.remaining() / kMinTensorInfoBytes, kMaxReserve});
  f->tensors_.reserve(reserve);
  std::vector<size_t> info_at;
  info_at.reserve(reserve);
  for (size_t i = 0; i < nt; ++i) {
    size_t ti_at = c.pos();
    TensorInfo ti;
    ti.name = c.str("tensor #" + std::to_string(i), "tensor name");
    const std::string ctx = "tensor " + quote(ti.name);
    size_t nd_at = c.pos();
    uint32_t n_dims = c.u32(ctx, "n_dims");
    if (n_dims < 1 || n_dims > kMaxDims)
      c.fail(nd_at, ctx, "n_dims " + std::to_string(n_dims) + " is outside 1.." + std::to_string(kMaxDims));
    ti.ne.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      size_t ne_at = c.pos();
      uint64_t ne = c.u64(ctx, "dimension");
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        c.fail(ne_at, ctx, "dimension " + std::to_string(d) + " is " + std::to_string(ne) + ", above INT64_MAX");
      ti.ne[d] = static_cast<int64_t>(ne);
    }
    size_t type_at = c.pos();
    uint32_t type_id = c.u32(ctx, "ggml type");
    const DTypeInfo* dt = find_dtype(type_id);
    if (!dt) c.fail(type_at, ctx, "unknown ggml type id " + std::to_string(type_id));
    ti.type = dt->type;
    ti.offset = c.u64(ctx, "data offset");

    // Geometry: rows are whole blocks; element count and byte size do not overflow.
    if (ti.ne[0] % dt->block_elems != 0)
      c.fail(ti_at, ctx, "row length " + std::to_string(ti.ne[0]) + " is not a multiple of the " +
                             dt->name + " block size " + std::to_string(dt->block_elems));
    int64_t n_el = 1;
    for (int64_t d : ti.ne)
      if (mul_overflow(n_el, d, &n_el))
        c.fail(ti_at, ctx, "element count overflows (dimensions too large)");
    size_t bytes = 0;
    bool ovf = mul_overflow(static_cast<size_t>(ti.ne[0] / dt->block_elems), dt->block_bytes, &bytes);
    for (uint32_t d = 1; d < n_dims && !ovf; ++d) ovf = mul_overflow(bytes, static_cast<size_t>(ti.ne[d]), &bytes);
    if (ovf) c.fail(ti_at, ctx, "byte size overflows (dimensions too large)");
    ti.n_bytes = bytes;

    auto [it, inserted] = f->tensor_index_.try_emplace(ti.name, i);
    if (!inserted)
      c.fail(ti_at, ctx, "duplicate tensor name (first defined at offset " +
                             std::to_string(info_at[it->second]) + ")");
    f->tensors_.push_back(std::move(ti));
    info_at.push_back(ti_at);
  }

  // Data section: starts at the next multiple of the alignment.
  const size_t end_of_infos = c.pos();
  const size_t align = f->alignment_;
  size_t data_offset = end_of_infos % align == 0 ? end_of_infos : end_of_infos + (align - end_of_infos % align);
  if (data_offset > size || data_offset < end_of_infos) {
    if (!f->tensors_.empty())
      c.fail(end_of_infos, "data section",
             "starts at offset " + std::to_string(data_offset) + " (alignment " + std::to_string(align) +
                 "), past the end of the file (" + std::to_string(size) + " bytes)");
    data_offset = size;  // no tensors (e.g. a vocab-only file without padding)
  }
  f->data_offset_ = data_offset;
  const size_t data_size = size - data_offset;
  for (size_t i = 0; i < nt; ++i) {
    TensorInfo& ti = f->tensors_[i];
    const std::string ctx = "tensor " + quote(ti.name);
    if (ti.offset % align != 0)
      c.fail(info_at[i], ctx, "data offset " + std::to_string(ti.offset) +
                                  " is not a multiple of the alignment " + std::to_string(align));
    if (ti.offset > data_size || ti.n_bytes > data_size - ti.offset)
      c.fail(info_at[i], ctx,
             "data (" + std::to_string(ti.n_bytes) + " bytes at data offset " + std::to_string(ti.offset) +
                 ") runs past the end of the file: the data section (from file offset " +
                 std::to_string(data_offset) + ") holds " + std::to_string(data_size) + " bytes");
    ti.data = data + data_offset + ti.offset;
  }

  // No two tensors share bytes: sorted by offset, each ends before the next starts.
  std::vector<size_t> order;
  order.reserve(nt);
  for (size_t i = 0; i < nt; ++i)
    if (f->tensors_[i].n_bytes > 0) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return f->tensors_[a].offset < f->tensors_[b].offset ||
           (f->tensors_[a].offset == f->tensors_[b].offset && a < b);
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& p = f->tensors_[order[k - 1]];
    const TensorInfo& q = f->tensors_[order[k]];
    if (p.offset + p.n_bytes > q.offset)
      c.fail(info_at[order[k]], "tensor " + quote(q.name),
             "data [" + std::to_string(q.offset) + ", " + std::to_string(q.offset + q.n_bytes) +
                 ") overlaps tensor " + quote(p.name) + " [" + std::to_string(p.offset) + ", " +
                 std::to_string(p.offset + p.n_bytes) + ")");
  }
  return f;
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second];
}

const Value& File::get(std::string_view key) const {
  if (const Value* v = find(key)) return *v;
  throw GGUFError(name_ + ": key " + quote(key) + " is missing");
}

int64_t File::get_int(std::string_view key, int64_t def) const {
  const Value* v = find(key);
  return v ? v->as_int() : def;
}

double File::get_float(std::string_view key, double def) const {
  const Value* v = find(key);
  return v ? v->as_float() : def;
}

bool File::get_bool(std::string_view key, bool def) const {
  const Value* v = find(key);
  return v ? v->as_bool() : def;
}

std::string File::get_string(std::string_view key, const std::string& def) const {
  const Value* v = find(key);
  return v ? v->as_string() : def;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

size_t File::tensor_bytes() const {
  size_t n = 0;
  for (const TensorInfo& t : tensors_) n += t.n_bytes;
  return n;
}

}  // namespace kvad::gguf
