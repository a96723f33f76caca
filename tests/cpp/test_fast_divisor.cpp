// The kernels' division by a host-computed multiplier and shift (src/common/fast_divisor.h):
// every divisor the launch can pass, against the quotient of plain division, at the edges of
// each divisor's multiples and of the numerator range (n < 2^31).
#include <gtest/gtest.h>
#include <stdint.h>

#include <random>
#include <vector>

#include "common/fast_divisor.h"

namespace {

using flashmsa::FastDivisor;
using flashmsa::fast_divisor;
using flashmsa::quotient;

std::vector<uint32_t> numerators_for(uint32_t divisor, std::mt19937& random) {
  std::vector<uint32_t> n = {0, 1, 2, 0x7ffffffeu, 0x7fffffffu};
  for (uint64_t k : {1ull, 2ull, 3ull, 1000ull, 0x7fffffffull / divisor}) {
    const uint64_t multiple = k * divisor;
    for (int64_t delta = -1; delta <= 1; ++delta) {
      const int64_t value = static_cast<int64_t>(multiple) + delta;
      if (value >= 0 && value <= 0x7fffffff) n.push_back(static_cast<uint32_t>(value));
    }
  }
  std::uniform_int_distribution<uint32_t> any(0, 0x7fffffffu);
  for (int i = 0; i < 64; ++i) n.push_back(any(random));
  return n;
}

void expect_exact(uint32_t divisor, std::mt19937& random) {
  const FastDivisor d = fast_divisor(divisor);
  ASSERT_EQ(d.divisor, divisor);
  for (uint32_t n : numerators_for(divisor, random)) {
    ASSERT_EQ(quotient(n, d), n / divisor) << "n " << n << " divisor " << divisor;
  }
}

TEST(FastDivisor, SmallDivisorsAreExact) {
  std::mt19937 random(7);
  for (uint32_t divisor = 1; divisor <= 4096; ++divisor) expect_exact(divisor, random);
}

TEST(FastDivisor, LargeDivisorsAreExact) {
  std::mt19937 random(11);
  std::uniform_int_distribution<uint32_t> any(1, 0x80000000u);
  for (uint32_t divisor : {0x7fffffffu, 0x80000000u, 0x40000000u, 0x40000001u, 65535u, 65537u}) {
    expect_exact(divisor, random);
  }
  for (int i = 0; i < 2000; ++i) expect_exact(any(random), random);
}

TEST(FastDivisor, ZeroIsTakenAsOne) {
  const FastDivisor d = fast_divisor(0);
  EXPECT_EQ(d.divisor, 1u);
  EXPECT_EQ(quotient(12345u, d), 12345u);
}

}  // namespace
