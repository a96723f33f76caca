// bf16 and fp16 <-> float on the host, bit-exact: widening is exact, narrowing rounds to nearest
// even (as torch's .to() does), with fp16 subnormals, overflow to infinity and NaN kept NaN.
#pragma once

#include <stdint.h>

#include "common/fp8.h"  // float_from_bits, bits_from_float

namespace flashmsa {

inline float bf16_to_float(uint16_t bits) {
  return float_from_bits(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t float_to_bf16(float value) {
  const uint32_t bits = bits_from_float(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN: keep sign, force quiet
  }
  // Adding 0x7FFF plus the lowest kept bit rounds half-way cases to the even neighbour; a carry
  // into the exponent is the correct result (up to and including overflow to infinity).
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float fp16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0x1F) return float_from_bits(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return float_from_bits(sign | bits_from_float(magnitude));
  }
  return float_from_bits(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

inline uint16_t float_to_fp16(float value) {
  const uint32_t bits = bits_from_float(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return sign | 0x7E00u;   // NaN
  if (magnitude >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: infinity
  const int32_t exponent = static_cast<int32_t>(magnitude >> 23) - 127 + 15;
  if (exponent <= 0) {
    // fp16 subnormal (or zero): the value in units of 2^-24, rounded to nearest even. Values
    // below 2^-25 (exponent < -10) round to zero; the shift below stays in range for the rest.
    if (exponent < -10) return sign;
    const uint32_t full_mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - exponent);  // 14..24
    uint32_t result = full_mantissa >> shift;
    const uint32_t remainder = full_mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (remainder > half || (remainder == half && (result & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);  // a carry into bit 10 is the smallest normal
  }
  // Normal: drop 13 mantissa bits with round to nearest even; a carry bumps the exponent.
  uint32_t result = (static_cast<uint32_t>(exponent) << 10) | ((magnitude >> 13) & 0x3FFu);
  const uint32_t remainder = magnitude & 0x1FFFu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

}  // namespace flashmsa
