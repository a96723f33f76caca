// Bit-level decoders and encoders: FP8 E4M3 (fn), E2M1, the NVFP4 swizzled scale layout, and the
// host bf16/fp16 conversions, each against known values or an independent formula.
#include <gtest/gtest.h>
#include <stdint.h>

#include <cmath>
#include <random>
#include <set>

#include "common/float16.h"
#include "common/fp8.h"
#include "common/nvfp4.h"

namespace {

using flashmsa::bf16_to_float;
using flashmsa::e2m1_to_float;
using flashmsa::e4m3_to_float;
using flashmsa::float_to_bf16;
using flashmsa::float_to_fp16;
using flashmsa::fp16_to_float;

TEST(E4M3, KnownValues) {
  struct Known {
    uint8_t byte;
    float value;
  };
  const Known table[] = {
      {0x00, 0.0f},       {0x01, 0.001953125f},  // smallest subnormal 2^-9
      {0x04, 0.0078125f}, {0x07, 0.013671875f},  // largest subnormal 7 * 2^-9
      {0x08, 0.015625f},                         // smallest normal 2^-6
      {0x30, 0.5f},       {0x38, 1.0f},          {0x3C, 1.5f},    {0x40, 2.0f},
      {0x77, 240.0f},     {0x78, 256.0f},        {0x7E, 448.0f},  // largest finite
      {0xB8, -1.0f},      {0x81, -0.001953125f}, {0xFE, -448.0f},
  };
  for (const Known& known : table) {
    EXPECT_EQ(e4m3_to_float(known.byte), known.value) << "byte 0x" << std::hex << int{known.byte};
  }
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80))) << "0x80 is -0";
  EXPECT_EQ(e4m3_to_float(0x80), 0.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F))) << "0x7f is NaN";
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF))) << "0xff is NaN";
}

TEST(E4M3, EveryByteMatchesTheFormula) {
  for (int byte = 0; byte < 256; ++byte) {
    const int exponent = (byte >> 3) & 0xF, mantissa = byte & 7;
    if (exponent == 15 && mantissa == 7) continue;  // NaN, checked above
    const double magnitude =
        exponent == 0 ? std::ldexp(mantissa, -9) : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
    const double expected = (byte & 0x80) ? -magnitude : magnitude;
    EXPECT_EQ(double{e4m3_to_float(static_cast<uint8_t>(byte))}, expected)
        << "byte 0x" << std::hex << byte;
  }
}

TEST(E2M1, AllSixteenNibbles) {
  const float table[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int nibble = 0; nibble < 16; ++nibble) {
    EXPECT_EQ(e2m1_to_float(nibble), table[nibble]) << "nibble " << nibble;
  }
  EXPECT_TRUE(std::signbit(e2m1_to_float(8))) << "nibble 8 is -0";
}

TEST(Nvfp4, LowNibbleIsTheEvenElement) {
  const uint8_t row[2] = {0x21, 0xF9};  // elements 0.5, 1, -0.5, -6
  EXPECT_EQ(flashmsa::nvfp4_element(row, 0), 0.5f);
  EXPECT_EQ(flashmsa::nvfp4_element(row, 1), 1.0f);
  EXPECT_EQ(flashmsa::nvfp4_element(row, 2), -0.5f);
  EXPECT_EQ(flashmsa::nvfp4_element(row, 3), -6.0f);
}

TEST(Nvfp4, ScaleOffsetKnownPositions) {
  struct Known {
    int64_t row, col, offset;
  };
  // Worked by hand from the contract's formula with cols = 8 (two 4-column tiles per 128 rows).
  const Known table[] = {
      {0, 0, 0},     {0, 3, 3},      {0, 4, 512},    {1, 0, 16},     {32, 0, 4},     {33, 1, 21},
      {31, 7, 1011}, {127, 7, 1023}, {128, 0, 1024}, {200, 5, 1673}, {300, 6, 2758}, {383, 7, 3071},
  };
  for (const Known& known : table) {
    EXPECT_EQ(flashmsa::nvfp4_scale_offset(known.row, known.col), known.offset)
        << "(row " << known.row << ", col " << known.col << ")";
  }
}

TEST(Nvfp4, ScaleOffsetsAreABijectionOntoWholeTiles) {
  std::set<int64_t> offsets;
  for (int64_t row = 0; row < 384; ++row) {
    for (int64_t col = 0; col < 8; ++col) {
      const int64_t offset = flashmsa::nvfp4_scale_offset(row, col);
      ASSERT_GE(offset, 0);
      ASSERT_LT(offset, flashmsa::nvfp4_scale_bytes_needed(384))
          << "(" << row << ", " << col << ")";
      offsets.insert(offset);
    }
  }
  EXPECT_EQ(offsets.size(), 384u * 8u);
}

TEST(Nvfp4, ScaleRowsAndSizes) {
  EXPECT_EQ(flashmsa::nvfp4_scale_row_flat(5, 1, 4), 21);       // token * Hkv + head
  EXPECT_EQ(flashmsa::nvfp4_scale_row_paged(3, 1, 7, 2), 903);  // (3*2+1)*128 + 7
  EXPECT_EQ(flashmsa::nvfp4_scale_bytes_needed(0), 0);
  EXPECT_EQ(flashmsa::nvfp4_scale_bytes_needed(1), 1024);
  EXPECT_EQ(flashmsa::nvfp4_scale_bytes_needed(128), 1024);
  EXPECT_EQ(flashmsa::nvfp4_scale_bytes_needed(129), 2048);
}

TEST(Bf16, KnownValuesAndRounding) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3F80) << "tie rounds to even (down)";
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3F82) << "tie rounds to even (up)";
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3F81) << "above the tie";
  EXPECT_EQ(float_to_bf16(3.4e38f), 0x7F80) << "overflows to infinity";
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_float(0x0001), std::ldexp(1.0f, -133)) << "bf16 subnormal";
}

TEST(Bf16, EveryValueRoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = bf16_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(float_to_bf16(value), bits) << "bf16 0x" << std::hex << bits;
  }
}

TEST(Fp16, KnownValuesAndRounding) {
  EXPECT_EQ(fp16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_float(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24)) << "smallest subnormal";
  EXPECT_EQ(fp16_to_float(0x03FF), 1023 * std::ldexp(1.0f, -24)) << "largest subnormal";
  EXPECT_EQ(fp16_to_float(0x0400), std::ldexp(1.0f, -14)) << "smallest normal";
  EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(fp16_to_float(0x7C00)));
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7E00)));
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7BFF) << "below the tie to infinity";
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00) << "tie rounds to even: infinity";
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000) << "tie rounds to even: zero";
  EXPECT_EQ(float_to_fp16(1.5f * std::ldexp(1.0f, -25)), 0x0001);
  EXPECT_EQ(float_to_fp16(3.0f * std::ldexp(1.0f, -25)), 0x0002) << "tie rounds to even";
  EXPECT_EQ(float_to_fp16(1023.5f * std::ldexp(1.0f, -24)), 0x0400) << "carry into normal";
  EXPECT_EQ(float_to_fp16(-std::ldexp(1.0f, -30)), 0x8000) << "underflow keeps the sign";
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00) << "tie rounds to even";
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(NAN))));
}

TEST(Fp16, EveryValueRoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = fp16_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(float_to_fp16(value), bits) << "fp16 0x" << std::hex << bits;
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own float -> _Float16 conversion rounds to nearest even: an independent oracle.
TEST(Fp16, NarrowingMatchesTheCompiler) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> exponent_biased(90, 150), any_bits;
  for (int n = 0; n < 200000; ++n) {
    // Random sign and mantissa, exponents from deep fp16-subnormal range to past overflow.
    const uint32_t bits = (any_bits(rng) & 0x807FFFFFu) | (exponent_biased(rng) << 23);
    const float value = flashmsa::float_from_bits(bits);
    const _Float16 narrowed = static_cast<_Float16>(value);
    uint16_t expected;
    memcpy(&expected, &narrowed, sizeof(expected));
    ASSERT_EQ(float_to_fp16(value), expected) << "float bits 0x" << std::hex << bits;
  }
}
#endif

}  // namespace
