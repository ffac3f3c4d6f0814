// PNG writing through libpng. libpng reports errors by longjmp; the one
// function that calls setjmp (encode_into) holds no object with a destructor,
// so nothing is skipped when it jumps, and every C++ allocation happens
// before it or inside callbacks that catch their own exceptions.
#include "io/png.h"

#include <png.h>

#include <charconv>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/utf8.h"

namespace kvad::png {

namespace {

struct Sink {
  std::string* out = nullptr;
  bool failed = false;
  char message[256] = {};
};

void on_error(png_structp png, png_const_charp msg) {
  auto* sink = static_cast<Sink*>(png_get_error_ptr(png));
  std::snprintf(sink->message, sizeof sink->message, "%s", msg ? msg : "libpng error");
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void on_write(png_structp png, png_bytep data, size_t n) {
  auto* sink = static_cast<Sink*>(png_get_io_ptr(png));
  try {
    sink->out->append(reinterpret_cast<const char*>(data), n);
  } catch (...) {
    sink->failed = true;
    png_error(png, "out of memory while writing");
  }
}

void on_flush(png_structp) {}

// Text prepared for libpng: keys and values as C strings that outlive the call.
struct PreparedText {
  std::string key, value;
  bool itxt = false;
};

// Returns false (and fills sink->message) on failure. No object with a
// destructor lives in this frame: see the file comment.
bool encode_into(Sink* sink, const uint8_t* rgb, uint32_t width, uint32_t height, png_text* texts, int n_texts,
                 png_bytep* rows) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, sink, on_error, on_warning);
  if (!png) {
    std::snprintf(sink->message, sizeof sink->message, "png_create_write_struct failed");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    std::snprintf(sink->message, sizeof sink->message, "png_create_info_struct failed");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, sink, on_write, on_flush);
  png_set_user_limits(png, static_cast<uint32_t>(kMaxSide), static_cast<uint32_t>(kMaxSide));
  png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (n_texts > 0) png_set_text(png, info, texts, n_texts);
  png_write_info(png, info);
  const size_t stride = static_cast<size_t>(width) * 3;
  for (uint32_t y = 0; y < height; ++y) rows[y] = const_cast<png_bytep>(rgb + y * stride);
  png_write_image(png, rows);
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return true;
}

void check_key(const std::string& key) {
  auto bad = [&](const char* why) {
    throw Error("png: text key \"" + key + "\": " + why + " (PNG keys are 1-79 Latin-1 characters)");
  };
  if (key.empty() || key.size() > 79) bad("length must be 1 to 79");
  for (unsigned char c : key)
    if (c < 32 || (c > 126 && c < 161)) bad("a character PNG keys may not hold");
  if (key.front() == ' ' || key.back() == ' ' || key.find("  ") != std::string::npos)
    bad("leading, trailing or doubled spaces");
}

// Latin-1 bytes of UTF-8 `s` when every character is below U+0100 (Pillow
// then writes tEXt); nullopt otherwise. Throws for invalid UTF-8.
std::optional<std::string> latin1_of(const std::string& s, const std::string& key) {
  std::string out;
  bool latin1 = true;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const int len = utf8::seq_len(static_cast<uint8_t>(s[i]));
    const uint32_t cp = utf8::decode(s, i);
    if (cp == 0xFFFD && !(len == 3 && s.compare(at, 3, "\xEF\xBF\xBD") == 0))
      throw Error("png: text \"" + key + "\": invalid UTF-8 at byte " + std::to_string(at));
    if (cp == 0) throw Error("png: text \"" + key + "\": a NUL character at byte " + std::to_string(at));
    if (cp > 0xFF) latin1 = false;
    if (latin1) out += static_cast<char>(cp);
  }
  if (!latin1) return std::nullopt;
  return out;
}

// Python's str() of a float: shortest round trip, "7" for 7.0 (A1111's form
// passes whole numbers as ints).
std::string number(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// A1111's infotext_utils.quote: json.dumps(text, ensure_ascii=False) when the
// value holds ',', ':' or a newline.
std::string quote(const std::string& s) {
  if (s.find_first_of(",:\n") == std::string::npos) return s;
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string encode_rgb8(std::span<const uint8_t> rgb, int64_t width, int64_t height,
                        const std::vector<TextChunk>& text) {
  if (width < 1 || height < 1 || width > kMaxSide || height > kMaxSide)
    throw Error("png: image size " + std::to_string(width) + "x" + std::to_string(height) +
                " out of range (each side 1 to " + std::to_string(kMaxSide) + ")");
  if (width * height > kMaxBytes / 3)
    throw Error("png: image size " + std::to_string(width) + "x" + std::to_string(height) + " is over " +
                std::to_string(kMaxBytes >> 20) + " MiB of pixels");
  const auto want = static_cast<size_t>(width * height * 3);
  if (rgb.size() != want)
    throw Error("png: pixel buffer holds " + std::to_string(rgb.size()) + " bytes, a " + std::to_string(width) + "x" +
                std::to_string(height) + " RGB8 image needs " + std::to_string(want));

  std::vector<PreparedText> prepared;
  prepared.reserve(text.size());
  for (const TextChunk& t : text) {
    check_key(t.key);
    PreparedText p;
    p.key = t.key;
    if (auto l1 = latin1_of(t.text, t.key)) {
      p.value = std::move(*l1);
    } else {
      p.value = t.text;
      p.itxt = true;
    }
    prepared.push_back(std::move(p));
  }
  std::vector<png_text> texts(prepared.size());
  for (size_t i = 0; i < prepared.size(); ++i) {
    png_text& t = texts[i];
    std::memset(&t, 0, sizeof t);
    t.compression = prepared[i].itxt ? PNG_ITXT_COMPRESSION_NONE : PNG_TEXT_COMPRESSION_NONE;
    t.key = prepared[i].key.data();
    t.text = prepared[i].value.data();
    if (prepared[i].itxt) {
      t.itxt_length = prepared[i].value.size();
      t.lang = const_cast<char*>("");
      t.lang_key = const_cast<char*>("");
    } else {
      t.text_length = prepared[i].value.size();
    }
  }
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  std::string out;
  out.reserve(want / 2 + 1024);
  Sink sink;
  sink.out = &out;
  if (!encode_into(&sink, rgb.data(), static_cast<uint32_t>(width), static_cast<uint32_t>(height), texts.data(),
                   static_cast<int>(texts.size()), rows.data()))
    throw Error(std::string("png: libpng: ") + sink.message);
  return out;
}

void write_rgb8(const std::string& path, std::span<const uint8_t> rgb, int64_t width, int64_t height,
                const std::vector<TextChunk>& text) {
  const std::string bytes = encode_rgb8(rgb, width, height, text);
  const std::string tmp = path + ".part";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(path + ": cannot write: " + std::strerror(errno));
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw Error(path + ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error(path + ": cannot write: " + ec.message());
  }
}

std::string a1111_parameters(const Parameters& p) {
  std::string params = "Steps: " + std::to_string(p.steps);
  auto add = [&](const char* k, const std::string& v) {
    if (!v.empty()) params += std::string(", ") + k + ": " + quote(v);
  };
  add("Sampler", p.sampler);
  add("Schedule type", p.schedule_type);
  add("CFG scale", number(p.cfg_scale));
  add("Seed", std::to_string(p.seed));
  add("Size", std::to_string(p.width) + "x" + std::to_string(p.height));
  add("Model hash", p.model_hash);
  add("Model", p.model);
  std::string s = p.prompt;
  if (!p.negative_prompt.empty()) s += "\nNegative prompt: " + p.negative_prompt;
  s += "\n" + params;
  // Python's str.strip(): whitespace at both ends.
  const char* ws = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace kvad::png
