// The key-visibility rules of src/common/visibility.h (contract sections 4 and 5), including
// their clamping of garbage values.
#include <gtest/gtest.h>
#include <stdint.h>

#include "common/visibility.h"

namespace {

using namespace flashmsa;

TEST(Visibility, ClampedRangeKeepsGarbageInBounds) {
  const int32_t cu_seqlens[] = {0, 10, 5, 100, -4};
  EXPECT_EQ(clamped_range(cu_seqlens, 0, 50).begin, 0);
  EXPECT_EQ(clamped_range(cu_seqlens, 0, 50).end, 10);
  EXPECT_EQ(clamped_range(cu_seqlens, 1, 50).end, 10) << "decreasing sums give an empty range";
  EXPECT_EQ(clamped_range(cu_seqlens, 2, 50).end, 50) << "past the tensor: clamped to total";
  EXPECT_EQ(clamped_range(cu_seqlens, 3, 50).begin, 50);
  EXPECT_EQ(clamped_range(cu_seqlens, 3, 50).end, 50) << "negative end: empty";
}

TEST(Visibility, RequestKeyLengths) {
  auto readable = [](auto... a) { return request_key_lengths(a...).readable; };
  auto declared = [](auto... a) { return request_key_lengths(a...).declared; };
  const int32_t cu_seqlens_k[] = {0, 300, 200};
  EXPECT_EQ(readable(false, cu_seqlens_k, nullptr, 0, 1000, 0), 300) << "flat";
  EXPECT_EQ(readable(false, cu_seqlens_k, nullptr, 0, 100, 0), 100) << "flat, clamped";
  EXPECT_EQ(declared(false, cu_seqlens_k, nullptr, 0, 100, 0), 100) << "flat, declared clamped";
  EXPECT_EQ(readable(false, cu_seqlens_k, nullptr, 1, 1000, 0), 0) << "flat, decreasing";
  const int32_t seqused_k[] = {300, -7, 5000, INT32_MAX};
  EXPECT_EQ(readable(true, nullptr, seqused_k, 0, 0, 4), 300) << "paged";
  EXPECT_EQ(readable(true, nullptr, seqused_k, 1, 0, 4), 0) << "paged, negative";
  EXPECT_EQ(readable(true, nullptr, seqused_k, 2, 0, 4), 512) << "paged, past the table";
  EXPECT_EQ(declared(true, nullptr, seqused_k, 2, 0, 4), 5000)
      << "paged, past the table: the declared length stays seqused_k (the default q_offset)";
  EXPECT_EQ(readable(true, nullptr, seqused_k, 3, 0, kMaxTablePages), INT32_MAX)
      << "paged, the widest table that matters";
}

TEST(Visibility, NumBlocksRoundsUp) {
  EXPECT_EQ(num_blocks(0), 0);
  EXPECT_EQ(num_blocks(1), 1);
  EXPECT_EQ(num_blocks(128), 1);
  EXPECT_EQ(num_blocks(129), 2);
}

TEST(Visibility, FirstQueryPositionModes) {
  const int32_t per_request[] = {7, -3};
  EXPECT_EQ(first_query_position(0, 99, nullptr, 0, 10, 300), 290) << "end-aligned";
  EXPECT_EQ(first_query_position(1, 99, nullptr, 0, 10, 300), 99) << "scalar";
  EXPECT_EQ(first_query_position(2, 99, per_request, 1, 10, 300), -3) << "per request";
}

TEST(Visibility, CausalKeyLimit) {
  EXPECT_EQ(key_limit(false, -50, 300), 300) << "non-causal ignores the position";
  EXPECT_EQ(key_limit(true, 10, 300), 11) << "key == position is visible";
  EXPECT_EQ(key_limit(true, 1000, 300), 300) << "never past seqlen_k";
  EXPECT_LE(key_limit(true, -1, 300), 0) << "negative position reads nothing";
}

TEST(Visibility, BlockSelection) {
  EXPECT_FALSE(block_selects_keys(-1, 1000, false, 0)) << "negative id";
  EXPECT_TRUE(block_selects_keys(0, 1, false, 0)) << "block 0 with one visible key";
  EXPECT_FALSE(block_selects_keys(1, 128, false, 0)) << "block past the key limit";
  EXPECT_TRUE(block_selects_keys(1, 129, false, 0));
  EXPECT_FALSE(block_selects_keys(0, 0, false, 0)) << "nothing visible";
  EXPECT_TRUE(block_selects_keys(3, 1000, true, 4)) << "paged, inside the table";
  EXPECT_FALSE(block_selects_keys(4, 1000, true, 4)) << "paged, past the table";
}

TEST(Visibility, PageOfBlockRejectsInvalidPages) {
  // Two requests, three table columns, row-major; entries outside [0, 10) are invalid.
  const int32_t page_table[] = {4, -1, 10, 9, 0, 2147483647};
  EXPECT_EQ(page_of_block(page_table, 3, 1, 0, 0, 10), 4);
  EXPECT_EQ(page_of_block(page_table, 3, 1, 0, 1, 10), -1) << "negative entry";
  EXPECT_EQ(page_of_block(page_table, 3, 1, 0, 2, 10), -1) << "entry == num_pages";
  EXPECT_EQ(page_of_block(page_table, 3, 1, 1, 0, 10), 9);
  EXPECT_EQ(page_of_block(page_table, 3, 1, 1, 1, 10), 0);
  EXPECT_EQ(page_of_block(page_table, 3, 1, 1, 2, 10), -1) << "huge entry";
  EXPECT_EQ(page_of_block(page_table, 1, 2, 1, 1, 10), 9) << "column-major strides";
}

}  // namespace
