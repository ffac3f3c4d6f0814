// io/png.h: pictures written by kvad read back by libpng's own reader
// (pixels, text chunks and their kinds), A1111's `parameters` spelling, and
// bad input as kvad::Error.
#include <gtest/gtest.h>
#include <png.h>

#include <csetjmp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "base/error.h"
#include "io/png.h"

namespace {

using kvad::png::TextChunk;

struct Decoded {
  uint32_t width = 0, height = 0;
  int bit_depth = 0, color_type = -1;
  std::vector<uint8_t> rgb;
  struct Text {
    std::string key, text;
    int compression;
  };
  std::vector<Text> texts;
};

struct Reader {
  const std::string* bytes;
  size_t at = 0;
};

void read_fn(png_structp png, png_bytep out, size_t n) {
  auto* r = static_cast<Reader*>(png_get_io_ptr(png));
  if (r->at + n > r->bytes->size()) png_error(png, "read past the end");
  std::memcpy(out, r->bytes->data() + r->at, n);
  r->at += n;
}

// libpng's reader, independent of the writer under test. Returns false on a
// libpng error (the caller's EXPECT fails).
bool decode_raw(const std::string& bytes, Decoded* d, std::vector<png_bytep>* rows) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  Reader reader{&bytes};
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, &reader, read_fn);
  png_read_info(png, info);
  d->width = png_get_image_width(png, info);
  d->height = png_get_image_height(png, info);
  d->bit_depth = png_get_bit_depth(png, info);
  d->color_type = png_get_color_type(png, info);
  d->rgb.resize(static_cast<size_t>(d->width) * d->height * 3);
  rows->resize(d->height);
  for (uint32_t y = 0; y < d->height; ++y) (*rows)[y] = d->rgb.data() + static_cast<size_t>(y) * d->width * 3;
  png_read_image(png, rows->data());
  png_read_end(png, info);
  png_textp text = nullptr;
  const int n = png_get_text(png, info, &text, nullptr);
  for (int i = 0; i < n; ++i) {
    const size_t len = text[i].compression >= PNG_ITXT_COMPRESSION_NONE ? text[i].itxt_length : text[i].text_length;
    d->texts.push_back({text[i].key, std::string(text[i].text, len), text[i].compression});
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

Decoded decode(const std::string& bytes) {
  Decoded d;
  std::vector<png_bytep> rows;
  EXPECT_TRUE(decode_raw(bytes, &d, &rows));
  return d;
}

std::vector<uint8_t> random_rgb(int64_t w, int64_t h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(static_cast<size_t>(w * h * 3));
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Png, PixelsAndTextReadBackByLibpng) {
  for (auto [w, h] : {std::pair<int64_t, int64_t>{1, 1}, {7, 3}, {64, 64}, {33, 129}}) {
    const auto rgb = random_rgb(w, h, static_cast<uint32_t>(w * 1000 + h));
    const std::vector<TextChunk> text = {
        {"parameters", "a red fox\nSteps: 20, Sampler: Euler"},
        {"Comment", "caf\xC3\xA9"},                     // Latin-1: tEXt
        {"Title", "\xE7\x8B\x90\xE7\x8B\xB8 in snow"},  // not Latin-1: iTXt
    };
    const std::string bytes = kvad::png::encode_rgb8(rgb, w, h, text);
    ASSERT_GT(bytes.size(), 8u);
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
    const Decoded d = decode(bytes);
    EXPECT_EQ(d.width, w);
    EXPECT_EQ(d.height, h);
    EXPECT_EQ(d.bit_depth, 8);
    EXPECT_EQ(d.color_type, PNG_COLOR_TYPE_RGB);
    EXPECT_EQ(d.rgb, rgb);
    ASSERT_EQ(d.texts.size(), 3u);
    EXPECT_EQ(d.texts[0].key, "parameters");
    EXPECT_EQ(d.texts[0].text, text[0].text);
    EXPECT_EQ(d.texts[0].compression, PNG_TEXT_COMPRESSION_NONE);
    EXPECT_EQ(d.texts[1].key, "Comment");
    EXPECT_EQ(d.texts[1].text, "caf\xE9");  // tEXt holds Latin-1 bytes
    EXPECT_EQ(d.texts[1].compression, PNG_TEXT_COMPRESSION_NONE);
    EXPECT_EQ(d.texts[2].key, "Title");
    EXPECT_EQ(d.texts[2].text, text[2].text);  // iTXt holds UTF-8
    EXPECT_EQ(d.texts[2].compression, PNG_ITXT_COMPRESSION_NONE);
  }
}

TEST(Png, WriteFileIsTheEncodedBytes) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvad_test_png_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "out.png").string();
  const auto rgb = random_rgb(5, 4, 7);
  kvad::png::write_rgb8(path, rgb, 5, 4, {{"parameters", "x"}});
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), kvad::png::encode_rgb8(rgb, 5, 4, {{"parameters", "x"}}));
  EXPECT_FALSE(std::filesystem::exists(path + ".part"));
  EXPECT_THROW(kvad::png::write_rgb8((dir / "no" / "such" / "dir.png").string(), rgb, 5, 4), kvad::Error);
  std::filesystem::remove_all(dir);
}

TEST(Png, BadInputIsAnError) {
  const std::vector<uint8_t> px(12, 0);
  EXPECT_THROW(kvad::png::encode_rgb8({}, 0, 4), kvad::Error);
  EXPECT_THROW(kvad::png::encode_rgb8({}, 4, 0), kvad::Error);
  EXPECT_THROW(kvad::png::encode_rgb8({}, -1, 4), kvad::Error);
  EXPECT_THROW(kvad::png::encode_rgb8(px, 2000000, 1), kvad::Error);
  // Each side allowed, the product too large: refused before any allocation.
  EXPECT_THROW(kvad::png::encode_rgb8(px, 1000000, 1000000), kvad::Error);
  EXPECT_THROW(kvad::png::encode_rgb8(px, int64_t{1} << 40, int64_t{1} << 40), kvad::Error);
  EXPECT_THROW(kvad::png::encode_rgb8(px, 2, 3), kvad::Error);  // 12 bytes, 18 needed
  EXPECT_NO_THROW(kvad::png::encode_rgb8(px, 2, 2));
  EXPECT_THROW(kvad::png::encode_rgb8(px, 2, 2, {{"", "x"}}), kvad::Error);
  EXPECT_THROW(kvad::png::encode_rgb8(px, 2, 2, {{std::string(80, 'k'), "x"}}), kvad::Error);
  EXPECT_THROW(kvad::png::encode_rgb8(px, 2, 2, {{" lead", "x"}}), kvad::Error);
  EXPECT_THROW(kvad::png::encode_rgb8(px, 2, 2, {{"two  spaces", "x"}}), kvad::Error);
  EXPECT_THROW(kvad::png::encode_rgb8(px, 2, 2, {{"bad\x01key", "x"}}), kvad::Error);
  EXPECT_THROW(kvad::png::encode_rgb8(px, 2, 2, {{"k", "bad \xFF utf-8"}}), kvad::Error);
  EXPECT_THROW(kvad::png::encode_rgb8(px, 2, 2, {{"k", std::string("nul\0inside", 10)}}), kvad::Error);
  try {
    kvad::png::encode_rgb8({}, 0, 4);
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("0x4"), std::string::npos) << e.what();
  }
}

TEST(Png, A1111ParametersSpelling) {
  kvad::png::Parameters p;
  p.prompt = "a red fox in fresh snow";
  p.negative_prompt = "blurry, lowres";
  p.steps = 30;
  p.sampler = "DPM++ 2M";
  p.schedule_type = "Karras";
  p.cfg_scale = 7;
  p.seed = 1234;
  p.width = 1024;
  p.height = 768;
  p.model = "stable-diffusion-xl-base-1.0";
  EXPECT_EQ(kvad::png::a1111_parameters(p),
            "a red fox in fresh snow\nNegative prompt: blurry, lowres\n"
            "Steps: 30, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7, Seed: 1234, Size: 1024x768, "
            "Model: stable-diffusion-xl-base-1.0");
  p.negative_prompt.clear();
  p.schedule_type.clear();
  p.cfg_scale = 7.5;
  p.sampler = "Euler a";
  p.model = "org/model:v1.safetensors";  // ':' is quoted as json.dumps does
  p.model_hash = "31e35c80fc";
  EXPECT_EQ(kvad::png::a1111_parameters(p),
            "a red fox in fresh snow\n"
            "Steps: 30, Sampler: Euler a, CFG scale: 7.5, Seed: 1234, Size: 1024x768, Model hash: 31e35c80fc, "
            "Model: \"org/model:v1.safetensors\"");
  p.prompt = "  spaced  \n";
  p.model.clear();
  p.model_hash.clear();
  p.cfg_scale = 0.1;
  EXPECT_EQ(kvad::png::a1111_parameters(p),
            "spaced  \n\nSteps: 30, Sampler: Euler a, CFG scale: 0.1, Seed: 1234, Size: 1024x768");
}

}  // namespace
