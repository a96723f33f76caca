// The one-token launch's cap on short splits (src/sm90/split_rules.h): the split counts the
// H200 measurements chose at batch 1-24 (M3 heads: 4 KV heads a request, topk 16), the same rule
// on other SM counts, and its invariants over a sweep of shapes.
#include <gtest/gtest.h>
#include <stdint.h>

#include "sm90/split_rules.h"

namespace {

using flashmsa::sm90::short_one_token_splits;

constexpr int64_t kH200Sms = 132;
constexpr int64_t kTopk = 16;

struct SmallBatch {
  int64_t batch;
  int32_t splits_before;  // what the earlier rules of tile_config give on 132 SMs
  int32_t expected;
};

TEST(ShortOneTokenSplits, MeasuredH200Choices) {
  const SmallBatch cases[] = {
      {1, 16, 16}, {2, 8, 8},  {3, 8, 8},  {4, 8, 6},   {5, 6, 4},   {6, 5, 4},
      {7, 4, 4},   {8, 4, 3},  {9, 3, 3},  {10, 3, 2},  {11, 3, 2},  {12, 2, 2},
      {13, 2, 2},  {15, 2, 2}, {16, 2, 2}, {20, 1, 1},  {24, 1, 1},  {33, 1, 1},
  };
  for (const SmallBatch& c : cases) {
    EXPECT_EQ(short_one_token_splits(4 * c.batch, kH200Sms, kTopk, c.splits_before), c.expected)
        << "batch " << c.batch << " from " << c.splits_before << " splits";
  }
}

TEST(ShortOneTokenSplits, SlicesOfEightBlocksKeepTheFullGrid) {
  // Batch 16: 64 units x 2 splits = 128 CTAs, past the cap, but slices of 8 blocks.
  EXPECT_EQ(short_one_token_splits(64, kH200Sms, kTopk, 2), 2);
  // topk 32 at batch 16: slices of 16.
  EXPECT_EQ(short_one_token_splits(64, kH200Sms, 32, 2), 2);
}

TEST(ShortOneTokenSplits, CapScalesWithTheSmCount) {
  // 78 SMs (H20): at most 66 CTAs of short splits.
  EXPECT_EQ(short_one_token_splits(16, 78, kTopk, 4), 4);   // 64 CTAs fit
  EXPECT_EQ(short_one_token_splits(20, 78, kTopk, 3), 3);   // 60
  EXPECT_EQ(short_one_token_splits(24, 78, kTopk, 3), 2);   // 72 > 66: 2 splits of 8
  EXPECT_EQ(short_one_token_splits(80, 78, kTopk, 1), 1);   // more units than CTAs: 1
}

TEST(ShortOneTokenSplits, UnevenSplitsDropToTheFewestOfTheSameLongestSlice) {
  // Within the cap, 5 splits of 16 blocks have a slice of 4, as 4 splits do.
  EXPECT_EQ(short_one_token_splits(4, kH200Sms, kTopk, 5), 4);
  EXPECT_EQ(short_one_token_splits(4, kH200Sms, kTopk, 7), 6);
  EXPECT_EQ(short_one_token_splits(4, kH200Sms, 12, 5), 4);  // slices of 3
}

TEST(ShortOneTokenSplits, NoBlocksLeavesTheCountAlone) {
  EXPECT_EQ(short_one_token_splits(16, kH200Sms, 0, 8), 8);
}

TEST(ShortOneTokenSplits, InvariantsOverShapes) {
  for (int64_t sms : {16, 78, 114, 132}) {
    for (int64_t max_union = 1; max_union <= 64; ++max_union) {
      for (int64_t units = 0; units <= 300; units += (units < 40 ? 1 : 13)) {
        for (int32_t splits = 1; splits <= std::min<int64_t>(max_union, 16); ++splits) {
          const int32_t got = short_one_token_splits(units, sms, max_union, splits);
          SCOPED_TRACE(testing::Message() << "sms " << sms << " union " << max_union
                                          << " units " << units << " splits " << splits);
          ASSERT_GE(got, 1);
          ASSERT_LE(got, splits);  // the rule only ever lowers the count
          const int64_t slice_before = (max_union + splits - 1) / splits;
          const int64_t slice_after = (max_union + got - 1) / got;
          // No fewer splits give the same longest slice.
          if (got > 1) ASSERT_GT((max_union + got - 2) / (got - 1), slice_after);
          const bool capped = slice_before < 8 && units > 0 && units * splits > sms * 17 / 20;
          if (!capped) {
            ASSERT_EQ(slice_after, slice_before);  // only the uneven count drops
          } else if (units <= sms * 17 / 20) {
            ASSERT_LE(units * got, sms * 17 / 20);  // the grid fits the cap
          }
        }
      }
    }
  }
}

}  // namespace
