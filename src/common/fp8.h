// FP8 E4M3 ("fn" variant, as torch.float8_e4m3fn) to float, exact, on host and device.
//
// Layout: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits. The "fn" variant has no
// infinities: exponent 15 is an ordinary binade except for mantissa 7, which is NaN
// (0x7f and 0xff). Largest finite value 448 (0x7e), smallest subnormal 2^-9 (0x01).
#pragma once

#include <stdint.h>

#include "common/visibility.h"

#if !defined(__CUDA_ARCH__)
#include <string.h>
#endif

namespace flashmsa {

FLASHMSA_HOST_DEVICE float float_from_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

FLASHMSA_HOST_DEVICE uint32_t bits_from_float(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

// Every E4M3 value is exactly representable in fp32, so the conversion is a re-packing of
// the fields: no rounding happens anywhere.
FLASHMSA_HOST_DEVICE float e4m3_to_float(uint8_t byte) {
  const uint32_t sign = static_cast<uint32_t>(byte >> 7) << 31;
  const uint32_t exponent = (byte >> 3) & 0xF;
  const uint32_t mantissa = byte & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return float_from_bits(sign | 0x7FC00000u);  // NaN
  if (exponent == 0) {
    // Subnormal: mantissa * 2^-9. The product is exact (mantissa < 8).
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 512.0f);
    return float_from_bits(sign | bits_from_float(magnitude));
  }
  // Normal: rebias the exponent from 7 to 127 and widen the mantissa from 3 to 23 bits.
  return float_from_bits(sign | ((exponent + 127 - 7) << 23) | (mantissa << 20));
}

}  // namespace flashmsa
