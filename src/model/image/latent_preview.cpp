#include "model/image/latent_preview.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "tensor/ops.h"

namespace kvad::image {

namespace {

// tools/fit_latent_preview.py's output (see the header for what they were fitted on).
constexpr float kA4[3][4] = {
    {-0.113432f, 0.121268f, -0.134225f, -0.0719433f},
    {0.298863f, 0.385993f, -0.315804f, 0.0456016f},
    {-0.106766f, -0.0379819f, 0.0988212f, 0.364434f},
};
constexpr float kB4[3] = {0.0677423f, 0.353885f, 0.127377f};
constexpr float kA16[3][16] = {
    {-0.234779f, -0.17735f, 0.167907f, 0.126917f, -0.0993312f, 0.362663f, -0.101274f, 0.122125f, -0.544338f,
     -0.0777003f, -0.124064f, -0.0154741f, 0.134761f, -0.0724592f, 0.0907131f, 0.457767f},
    {0.0015276f, 0.293329f, -0.0726005f, 0.306116f, 1.71306e-05f, 0.245711f, 0.275721f, -0.350102f, 0.0320856f,
     -0.295103f, -0.00623416f, 0.287479f, 0.173846f, -0.164492f, -0.171065f, -0.0176355f},
    {-0.280336f, -0.418567f, 0.0265391f, -0.00250525f, -0.0876129f, 0.0865745f, -0.15668f, 0.187716f, -0.410871f,
     0.171495f, -0.280741f, -0.14545f, 0.0596707f, -0.17329f, 0.153481f, 0.241452f},
};
constexpr float kB16[3] = {-0.101705f, -0.223584f, -0.19372f};

}  // namespace

std::vector<uint8_t> latent_preview_rgb(const Tensor& latent, int64_t sample) {
  const std::string head = "latent_preview_rgb: latent ";
  if (!latent) throw Error(head + "is empty");
  const int64_t C = latent.ne[0], w = latent.ne[1], h = latent.ne[2], N = latent.ne[3];
  if (latent.type != DType::F32) throw Error(head + shape_str(latent) + " is " + dtype_name(latent.type) + ", not f32");
  if (C != 4 && C != 16)
    throw Error(head + shape_str(latent) + " has " + std::to_string(C) + " channels; previews exist for 4 and 16");
  if (sample < 0 || sample >= N)
    throw Error(head + shape_str(latent) + ": sample " + std::to_string(sample) + " outside 0.." +
                std::to_string(N - 1));
  const int64_t px = w * h;
  std::vector<float> z(static_cast<size_t>(C * px));
  ops::to_host(ops::cont(latent).rows(sample * px, (sample + 1) * px), z.data());
  const float* A = C == 4 ? &kA4[0][0] : &kA16[0][0];
  const float* b = C == 4 ? kB4 : kB16;
  std::vector<uint8_t> rgb(static_cast<size_t>(3 * px));
  for (int64_t p = 0; p < px; ++p)
    for (int64_t k = 0; k < 3; ++k) {
      float v = b[k];
      for (int64_t c = 0; c < C; ++c) v += A[k * C + c] * z[p * C + c];
      v = std::nearbyint((v + 1.0f) * 127.5f);
      rgb[p * 3 + k] = std::isnan(v) ? 0 : static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));  // NaN: black
    }
  return rgb;
}

}  // namespace kvad::image
