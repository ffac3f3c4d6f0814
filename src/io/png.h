// PNG output of 8-bit RGB pictures through libpng (Debian libpng-dev), with
// text chunks: how kvad hands a finished image to the user, an image browser
// or an HTTP client (base64 of these bytes).
//
// Text chunks follow Pillow's PngInfo.add_text, which A1111, ComfyUI and
// diffusers' users write with: a value whose characters are all Latin-1 goes
// into a tEXt chunk (Latin-1 bytes), any other into an uncompressed iTXt chunk
// (UTF-8). a1111_parameters() spells the `parameters` chunk the way
// AUTOMATIC1111's stable-diffusion-webui does (modules/processing.py
// create_infotext), which image browsers parse.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvad::png {

/// One text chunk: `key` 1..79 Latin-1 characters without NUL and without
/// leading, trailing or doubled spaces (PNG 1.2, 11.3.4.1); `text` UTF-8.
struct TextChunk {
  std::string key;
  std::string text;
};

/// Largest width or height accepted (libpng's own default user limit).
inline constexpr int64_t kMaxSide = 1000000;
/// Largest pixel buffer accepted, in bytes (width * height * 3).
inline constexpr int64_t kMaxBytes = int64_t{1} << 31;

/// Encodes `rgb` ([height][width][3] bytes, rows top to bottom, no padding)
/// as a PNG (8-bit RGB, no interlace, zlib's default compression) with
/// `text` chunks before the image data, in order. Returns the file's bytes.
/// Throws kvad::Error for width or height < 1 or > kMaxSide, a buffer larger
/// than kMaxBytes, `rgb.size() != width * height * 3`, a text key that PNG
/// does not allow, text that is not valid UTF-8, or a libpng failure (its
/// message).
std::string encode_rgb8(std::span<const uint8_t> rgb, int64_t width, int64_t height,
                        const std::vector<TextChunk>& text = {});

/// encode_rgb8, written to `path` (a temporary file beside it, renamed into
/// place, so a reader never sees half a picture). Throws kvad::Error as
/// encode_rgb8 does, or naming `path` when it cannot be written.
void write_rgb8(const std::string& path, std::span<const uint8_t> rgb, int64_t width, int64_t height,
                const std::vector<TextChunk>& text = {});

/// What AUTOMATIC1111's webui writes into the `parameters` chunk.
struct Parameters {
  std::string prompt;
  std::string negative_prompt;  ///< its line is left out when empty, as A1111 does
  int steps = 0;
  std::string sampler;          ///< A1111's sampler names: "Euler", "Euler a", "DDIM", "DPM++ 2M"
  std::string schedule_type;    ///< "Karras" for Karras sigmas; left out when empty
  double cfg_scale = 0;
  uint64_t seed = 0;
  int64_t width = 0, height = 0;
  std::string model;            ///< left out when empty
  std::string model_hash;       ///< left out when empty
};

/// The `parameters` text: "PROMPT\nNegative prompt: NEG\nSteps: 20, Sampler:
/// Euler a, Schedule type: Karras, CFG scale: 7, Seed: 1, Size: 512x512,
/// Model hash: H, Model: M". Numbers as Python's str() writes them (7.5, and
/// 7 for 7.0 as A1111's form does); a value holding ',', ':' or a newline is
/// quoted as json.dumps does (A1111's quote()).
std::string a1111_parameters(const Parameters& p);

}  // namespace kvad::png
