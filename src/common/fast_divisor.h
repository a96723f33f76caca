// n / divisor for 0 <= n < 2^31 in two dependent integer instructions, where a runtime
// division is about fifteen around a MUFU.RCP: the host computes multiplier and shift once
// (fast_divisor) and the quotient is (umulhi(n, multiplier) + n) >> shift, the round-up method
// (umulhi(n, multiplier) < n keeps the sum below 2^32). The sm90 kernels divide their block
// index this way at CTA entry, on the path to the first load (planning.cuh: cta_work), and the
// split CTAs their union into slices (tile_plan).
#pragma once

#include <stdint.h>

#include "common/visibility.h"  // FLASHMSA_HOST_DEVICE

namespace flashmsa {

struct FastDivisor {
  uint32_t divisor;
  uint32_t multiplier;
  uint32_t shift;
};

// shift = ceil(log2(divisor)), multiplier = floor(2^32 (2^shift - divisor) / divisor) + 1, which
// is below 2^32 because 2^(shift - 1) < divisor. A divisor of 0 is taken as 1: nothing divides
// by it (a launch with no tiles runs no CTA).
inline FastDivisor fast_divisor(uint32_t divisor) {
  if (divisor == 0) divisor = 1;
  uint32_t shift = 0;
  while ((uint64_t{1} << shift) < divisor) ++shift;
  const uint64_t multiplier =
      ((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1;
  return FastDivisor{divisor, static_cast<uint32_t>(multiplier), shift};
}

// n / d.divisor for n < 2^31.
FLASHMSA_HOST_DEVICE uint32_t quotient(uint32_t n, FastDivisor d) {
#if defined(__CUDA_ARCH__)
  const uint32_t high = __umulhi(n, d.multiplier);
#else
  const uint32_t high = static_cast<uint32_t>((uint64_t{n} * d.multiplier) >> 32);
#endif
  return (high + n) >> d.shift;
}

}  // namespace flashmsa
