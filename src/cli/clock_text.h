// Durations as progress lines show them (downloads, denoising steps).
#pragma once
#include <cstdio>
#include <string>

namespace kvad::cli {

/// "m:ss" or "h:mm:ss" for a duration in seconds, rounded; "--:--" for a
/// negative, NaN or over 99 hours.
inline std::string clock_str(double s) {
  if (!(s >= 0) || s > 99 * 3600) return "--:--";
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

}  // namespace kvad::cli
