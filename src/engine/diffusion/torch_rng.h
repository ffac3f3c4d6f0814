// Initial noise drawn exactly as PyTorch's CPU generator draws it, so that a
// seed gives the latent diffusers starts from:
//   torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed))
// (float32, contiguous). This is kvad's `--rng torch`.
//
// Source: PyTorch aten/src/ATen/CPUGeneratorImpl.cpp (mt19937 seeded with the
// low 32 bits of the seed), core/DistributionsHelper.h and
// core/TransformationHelper.h (uniform and Box-Muller normal distributions),
// native/cpu/DistributionTemplates.h (normal_kernel: for 16 or more floats
// all uniforms are drawn first and turned into normals 16 at a time, pairing
// j with j + 8, the last 16 redrawn when the size is not a multiple of 16;
// the x86-64 wheels (CPU capability AVX2 or AVX512) do this with the
// Cephes-derived log and sincos of native/cpu/avx_mathfun.h, compiled with
// fused multiply-adds where GCC contracts them; below 16 floats each value is
// one double-precision Box-Muller draw that caches its sine for the next).
// A torch build without AVX2 (aarch64, x86 DEFAULT capability) uses libm's
// logf/sinf/cosf in the 16-at-a-time path instead: not reproduced here.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace kvad::diffusion {

/// torch.randn(n, generator=torch.Generator("cpu").manual_seed(seed)) for a
/// float32 tensor of n elements: writes the n values to `out` (its size is
/// n). Bit-exact with PyTorch 2.x on x86-64 (tests/engine/diffusion compare
/// against torch's own output). A seed above 2^32 - 1 keeps its low 32 bits,
/// as torch's mt19937 does; a negative Python seed is its two's complement.
void torch_randn(uint64_t seed, std::span<float> out);

/// The same, returned as a vector of `n` values.
std::vector<float> torch_randn(uint64_t seed, size_t n);

/// One mt19937 stream as torch's CPUGeneratorImpl holds it: `random()` is
/// one 32-bit draw, `random64()` two (the first the high half), and the
/// double normal cached by a Box-Muller pair. Exposed for tests and for the
/// ancestral samplers' per-step noise, which keep drawing from the same
/// generator (diffusers passes it to every step).
class TorchGenerator {
 public:
  explicit TorchGenerator(uint64_t seed);
  uint32_t random();
  uint64_t random64();
  /// torch.randn on this generator's state: `out` as torch_randn fills it.
  void randn(std::span<float> out);

 private:
  double normal_double();
  std::mt19937 engine_;  // the standard fixes mt19937's output, and torch's init_with_uint32 is its seeding
  bool has_next_double_ = false;
  double next_double_ = 0;
};

}  // namespace kvad::diffusion
