// How `kvad images make` hands pictures to the user: file names made from
// the prompt and the seed that never replace an existing file, and a
// progress line per denoising step (step time, ETA) on stderr.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kvad::cli {

/// A file name stem from the prompt's first words and the seed: up to 6
/// words of ASCII letters and digits, lower-cased, joined by '-', at most 60
/// characters, then "-SEED" ("a photo of a Cat, 8k" and 42 ->
/// "a-photo-of-a-cat-8k-42"); "image-SEED" when the prompt has no such word.
std::string image_stem(const std::string& prompt, uint64_t seed);

/// `wanted` ("DIR/NAME.png"), or the first of "DIR/NAME-1.png",
/// "DIR/NAME-2.png", ... that does not exist, created empty (O_EXCL) so that
/// two runs at once never pick the same name; the picture is then written
/// over it (png::write_rgb8 renames into place). Throws kvad::Error naming the
/// path when the folder cannot be written or 10000 names are taken.
std::string reserve_image_path(const std::string& wanted);

/// A denoising progress line on `out`: redrawn in place on a terminal
/// ("  step 3/20 [#####      ] 0.52 s/step  ETA 0:09"), else one line at each
/// quarter of the steps and at the end, so a log stays short.
class StepProgress {
 public:
  explicit StepProgress(FILE* out = stderr);
  /// After step `step` of `total` (1-based), which took `step_s` seconds, `elapsed_s` in all.
  void on_step(int64_t step, int64_t total, double step_s, double elapsed_s);
  /// Ends an open bar line.
  void finish();

 private:
  FILE* out_;
  bool tty_;
  bool open_ = false;
  int quarter_ = 0;
};

}  // namespace kvad::cli
