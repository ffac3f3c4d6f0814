// Peak signal-to-noise ratios the numeric tests compare against references
// (diffusers, transformers) with.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvad::test {

/// PSNR in dB of `got` against `want` (n elements each) over want's peak:
/// 10·log10(max|want|² / MSE). 999 when the two are equal, -1 when the
/// error is NaN (a NaN in `got`).
inline double psnr(const float* got, const float* want, size_t n) {
  double peak = 0, se = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    peak = std::max(peak, std::fabs(static_cast<double>(want[i])));
    se += d * d;
  }
  if (std::isnan(se)) return -1;
  return se == 0 ? 999 : 10 * std::log10(peak * peak / (se / static_cast<double>(n)));
}

/// As above over two vectors; -1 when their sizes differ.
inline double psnr(const std::vector<float>& got, const std::vector<float>& want) {
  return got.size() == want.size() ? psnr(got.data(), want.data(), want.size()) : -1;
}

/// PSNR in dB of 8-bit pixels: 10·log10(255² / MSE) over n bytes; 999 when
/// equal.
inline double psnr8(const uint8_t* got, const uint8_t* want, size_t n) {
  double se = 0;
  for (size_t i = 0; i < n; ++i) se += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
  return se == 0 ? 999 : 10 * std::log10(255.0 * 255.0 / (se / static_cast<double>(n)));
}

}  // namespace kvad::test
