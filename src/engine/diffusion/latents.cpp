#include "engine/diffusion/latents.h"

#include <cmath>
#include <string>

#include "base/error.h"

namespace kvad::diffusion {

namespace {

void check(size_t got, int64_t want, const char* what) {
  if (static_cast<int64_t>(got) != want)
    throw Error(std::string(what) + ": " + std::to_string(got) + " values for " + std::to_string(want));
}

}  // namespace

namespace {

// Moves each (n, c, y, x) between torch's NCHW offset and the {C, W, H, N} one.
void relayout(std::span<const float> src, std::span<float> dst, const ImageDims& d, bool to_cwhn, const char* what) {
  check(src.size(), d.count(), (std::string(what) + ": source").c_str());
  check(dst.size(), d.count(), (std::string(what) + ": destination").c_str());
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t y = 0; y < d.h; ++y)
        for (int64_t x = 0; x < d.w; ++x) {
          const auto nchw = static_cast<size_t>(((n * d.c + c) * d.h + y) * d.w + x);
          const auto cwhn = static_cast<size_t>(((n * d.h + y) * d.w + x) * d.c + c);
          if (to_cwhn) dst[cwhn] = src[nchw];
          else dst[nchw] = src[cwhn];
        }
}

}  // namespace

void nchw_to_cwhn(std::span<const float> src, std::span<float> dst, const ImageDims& d) {
  relayout(src, dst, d, true, "nchw_to_cwhn");
}

void cwhn_to_nchw(std::span<const float> src, std::span<float> dst, const ImageDims& d) {
  relayout(src, dst, d, false, "cwhn_to_nchw");
}

void guidance_combine(std::span<const float> uncond, std::span<const float> cond, float scale,
                      std::span<float> out) {
  if (uncond.size() != cond.size() || out.size() != cond.size())
    throw Error("guidance_combine: " + std::to_string(uncond.size()) + " unconditional, " +
                std::to_string(cond.size()) + " conditional and " + std::to_string(out.size()) + " output values");
  for (size_t i = 0; i < out.size(); ++i) {
    const float diff = cond[i] - uncond[i];
    const float scaled = scale * diff;
    out[i] = uncond[i] + scaled;
  }
}

uint8_t to_u8(float x) {
  float v = x / 2.0f + 0.5f;
  if (!(v > 0.0f)) v = 0.0f;  // NaN too
  if (v > 1.0f) v = 1.0f;
  return static_cast<uint8_t>(std::nearbyint(v * 255.0f));
}

void to_rgb8(std::span<const float> x, std::span<uint8_t> out) {
  if (x.size() != out.size())
    throw Error("to_rgb8: " + std::to_string(x.size()) + " values for " + std::to_string(out.size()) + " bytes");
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_u8(x[i]);
}

namespace {
void check_pack(size_t a, size_t b, const ImageDims& d) {
  if (d.h % 2 || d.w % 2 || a != static_cast<size_t>(d.count()) || b != a)
    throw Error("latent packing: " + std::to_string(a) + " and " + std::to_string(b) + " values for " +
                std::to_string(d.n) + "×" + std::to_string(d.c) + "×" + std::to_string(d.h) + "×" +
                std::to_string(d.w) + " (even sides)");
}
// The packed index of NCHW element (n, c, y, x).
size_t packed_index(const ImageDims& d, int64_t n, int64_t c, int64_t y, int64_t x) {
  const int64_t pw = d.w / 2, L = (d.h / 2) * pw, F = d.c * 4;
  return static_cast<size_t>((n * L + (y / 2) * pw + x / 2) * F + c * 4 + (y % 2) * 2 + x % 2);
}
}  // namespace

namespace {
// Calls f(i, j) for every NCHW element in order: i its index in NCHW, j its
// packed index.
template <class F>
void each_packed(const ImageDims& d, F&& f) {
  size_t i = 0;
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t y = 0; y < d.h; ++y)
        for (int64_t x = 0; x < d.w; ++x) f(i++, packed_index(d, n, c, y, x));
}
}  // namespace

void pack_latents(std::span<const float> src, std::span<float> dst, const ImageDims& d) {
  check_pack(src.size(), dst.size(), d);
  each_packed(d, [&](size_t i, size_t j) { dst[j] = src[i]; });
}

void unpack_latents(std::span<const float> src, std::span<float> dst, const ImageDims& d) {
  check_pack(src.size(), dst.size(), d);
  each_packed(d, [&](size_t i, size_t j) { dst[i] = src[j]; });
}

}  // namespace kvad::diffusion
