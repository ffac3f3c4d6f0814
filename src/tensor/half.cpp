// IEEE 754 binary16 <-> binary32, scalar and exact (integer arithmetic only,
// so the result does not depend on the FPU's rounding mode, FTZ/DAZ or FMA
// contraction). Matches F16C's VCVTPS2PH with round-to-nearest-even and
// numpy's float32 -> float16 cast bit for bit, NaN payloads included
// (a NaN becomes a quiet NaN keeping its top 10 payload bits).
#include "tensor/half.h"

namespace kvad {

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;  // +-0
    } else {
      // Subnormal: value = mant * 2^-24; normalize.
      int e = -14;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --e;
      }
      mant &= 0x3ffu;
      bits = sign | (static_cast<uint32_t>(e + 127) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf or NaN (payload kept)
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {
    if (ax == 0x7f800000u) return sign | 0x7c00u;                          // inf
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // quiet NaN
  }
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  const int e = static_cast<int>(ax >> 23) - 127;
  if (e >= -14) {
    // Normal half. Rounding may carry into the exponent, which is correct.
    const uint32_t m = ax & 0x7fffffu;
    uint32_t h = (static_cast<uint32_t>(e + 15) << 10) | (m >> 13);
    const uint32_t rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  if (e < -25) return sign;  // below 2^-25: rounds to zero
  // Subnormal half: value = m * 2^(e-23), in units of 2^-24 that is m >> shift.
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const int shift = -(e + 1);  // 14..24
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;  // may become the smallest normal
  return static_cast<uint16_t>(sign | h);
}

}  // namespace kvad
