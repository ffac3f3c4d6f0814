// Internal: the array arithmetic diffusers' schedulers do with numpy and
// torch, reproduced operation for operation (the float32 ones in float,
// numpy's float64 ones in double), so timesteps and sigmas come out as
// diffusers' do. Not a public header.
#pragma once
#include <cstdint>
#include <vector>

namespace kvad::diffusion::math {

/// torch.linspace(start, end, steps, dtype=torch.float32) on the CPU: float
/// step, the first half from start and the second half back from end, each
/// value one fused multiply-add (aten RangeFactoriesKernel.cpp linspace_kernel,
/// built with GCC's default contraction). steps >= 2.
std::vector<float> torch_linspace_f32(double start, double end, int64_t steps);

/// numpy.linspace(start, stop, num) in float64: i * step + start, the last
/// value stop itself.
std::vector<double> np_linspace(double start, double stop, int64_t num);

/// numpy.arange(start, stop, step) in float64 (step < 0 here): the length
/// ceil((stop - start) / step); values start + i * d with d = (start + step)
/// - start, as numpy's fill() computes them.
std::vector<double> np_arange(double start, double stop, double step);

/// numpy.interp(x, arange(fp.size()), fp) with fp float32 values.
double np_interp_index(double x, const std::vector<float>& fp);

/// diffusers' _sigma_to_t: the fractional train timestep whose log sigma
/// interpolates `sigma`'s, in the float32 `log_sigmas` table.
double sigma_to_t(double sigma, const std::vector<float>& log_sigmas);

/// diffusers' _convert_to_karras: n sigmas from sigma_max down to sigma_min,
/// rho = 7 (Karras et al. 2022, eq. 5).
std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int64_t n);

}  // namespace kvad::diffusion::math
