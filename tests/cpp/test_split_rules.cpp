// The launch rules of src/sm90/split_rules.h: which calls the one-token kernel takes (the H200
// measurements' choices for multi-token prediction, other SM counts, the override, invariants),
// and the one-token launch's cap on short splits: the split counts the H200 measurements chose
// at batch 1-24 (M3 heads: 4 KV heads a request, topk 16), the same rule on other SM counts,
// and its invariants over a sweep of shapes; and the split count of short prefill calls.
#include <gtest/gtest.h>
#include <stdint.h>

#include <algorithm>

#include "sm90/split_rules.h"

namespace {

using flashmsa::sm90::short_one_token_splits;
using flashmsa::sm90::short_prefill_splits;
using flashmsa::sm90::takes_one_token_kernel;

constexpr int64_t kH200Sms = 132;
constexpr int64_t kTopk = 16;
constexpr int64_t kM3KvHeads = 4;
constexpr int32_t kRule = 1;  // the rule, no override

struct RowsPerRequest {
  int64_t batch;
  int64_t rows;  // per request
  bool one_token;
};

TEST(TakesOneTokenKernel, MeasuredH200Choices) {
  // Faster on the one-token kernel at every KV length measured (1000-200000): rows x 4 KV
  // heads <= 132. Slower at short KV (4000): batch 5 and 8 with 8 rows, 32 with 2, 16 with 4.
  const RowsPerRequest cases[] = {
      {1, 8, true},  {2, 8, true},   {3, 8, true},   {4, 8, true},   {5, 8, false},
      {6, 8, false}, {8, 8, false},  {32, 8, false}, {1, 2, true},   {4, 2, true},
      {16, 2, true}, {32, 2, false}, {2, 4, true},   {8, 4, true},   {16, 4, false},
      {1, 1, true},  {64, 1, true},  {128, 1, true}, {1000, 1, true},
  };
  for (const RowsPerRequest& c : cases) {
    EXPECT_EQ(takes_one_token_kernel(true, c.batch * c.rows, c.batch, kM3KvHeads, kH200Sms, kRule),
              c.one_token)
        << "batch " << c.batch << " x " << c.rows << " rows";
  }
}

TEST(TakesOneTokenKernel, RowsPastEightPerRequestOrOtherShapesDoNot) {
  // 16 rows of one request fit the SMs, but are a prefill chunk's tile.
  EXPECT_FALSE(takes_one_token_kernel(true, 16, 1, kM3KvHeads, kH200Sms, kRule));
  EXPECT_TRUE(takes_one_token_kernel(true, 8, 1, kM3KvHeads, kH200Sms, kRule));
  // Heads or topk the kernel does not take: never, whatever the rows.
  EXPECT_FALSE(takes_one_token_kernel(false, 64, 64, kM3KvHeads, kH200Sms, kRule));
  EXPECT_FALSE(takes_one_token_kernel(false, 8, 1, kM3KvHeads, kH200Sms, kRule));
}

TEST(TakesOneTokenKernel, OneCtaPerSmScalesWithTheSmCountAndKvHeads) {
  // 78 SMs (H20): 16 rows x 4 heads fit, 24 do not.
  EXPECT_TRUE(takes_one_token_kernel(true, 16, 2, kM3KvHeads, 78, kRule));
  EXPECT_FALSE(takes_one_token_kernel(true, 24, 3, kM3KvHeads, 78, kRule));
  // One KV head: 132 rows fit on the H200, 136 do not.
  EXPECT_TRUE(takes_one_token_kernel(true, 132, 33, 1, kH200Sms, kRule));
  EXPECT_FALSE(takes_one_token_kernel(true, 136, 17, 1, kH200Sms, kRule));
}

TEST(TakesOneTokenKernel, Overrides) {
  // 0: never, not even a decode batch; 2: every call of at most 8 rows per request.
  EXPECT_FALSE(takes_one_token_kernel(true, 64, 64, kM3KvHeads, kH200Sms, 0));
  EXPECT_TRUE(takes_one_token_kernel(true, 256, 32, kM3KvHeads, kH200Sms, 2));
  EXPECT_FALSE(takes_one_token_kernel(true, 264, 32, kM3KvHeads, kH200Sms, 2));
  EXPECT_FALSE(takes_one_token_kernel(false, 8, 8, kM3KvHeads, kH200Sms, 2));
}

TEST(TakesOneTokenKernel, InvariantsOverShapes) {
  for (int64_t sms : {16, 78, 132}) {
    for (int64_t heads : {1, 2, 4, 8}) {
      for (int64_t batch = 1; batch <= 40; ++batch) {
        for (int64_t total_q = 0; total_q <= 12 * batch; ++total_q) {
          SCOPED_TRACE(testing::Message() << "sms " << sms << " heads " << heads << " batch "
                                          << batch << " rows " << total_q);
          const bool rule = takes_one_token_kernel(true, total_q, batch, heads, sms, kRule);
          // Decode batches always; otherwise only within the forced mode's calls, and only
          // where the rows fit one CTA per SM.
          if (total_q == batch) ASSERT_TRUE(rule);
          if (rule) {
            ASSERT_TRUE(takes_one_token_kernel(true, total_q, batch, heads, sms, 2));
            ASSERT_TRUE(total_q == batch || total_q * heads <= sms);
          }
          ASSERT_FALSE(takes_one_token_kernel(true, total_q, batch, heads, sms, 0));
        }
      }
    }
  }
}

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

TEST(ShortPrefillSplits, MeasuredH200Choices) {
  // The production short chunks (8-token tiles x 4 KV heads): 171 tokens on 55K keys (433
  // blocks) 22 tiles, 338 on 75K 43, 347 on 132K 44.
  EXPECT_EQ(short_prefill_splits(88, kH200Sms, 433, 16), 3);    // 264 CTAs: 2 waves of a third
  EXPECT_EQ(short_prefill_splits(92, kH200Sms, 433, 16), 4);    // 368: 3 waves of a quarter
  EXPECT_EQ(short_prefill_splits(172, kH200Sms, 583, 16), 3);   // 516: 4 waves of a third
  EXPECT_EQ(short_prefill_splits(176, kH200Sms, 1028, 16), 3);
  // 182 tokens on 18K keys (139 blocks): short unions, no split.
  EXPECT_EQ(short_prefill_splits(92, kH200Sms, 139, 16), 1);
  // One full wave, and more than two waves (1404 tokens: 704 units): no split.
  EXPECT_EQ(short_prefill_splits(132, kH200Sms, 433, 16), 1);
  EXPECT_EQ(short_prefill_splits(704, kH200Sms, 433, 16), 1);
  // At most half the slots: the plan's general rule (slots / units) decides.
  EXPECT_EQ(short_prefill_splits(66, kH200Sms, 433, 16), 1);
  EXPECT_EQ(short_prefill_splits(0, kH200Sms, 433, 16), 1);
  // The call's own limit on splits holds.
  EXPECT_EQ(short_prefill_splits(88, kH200Sms, 433, 2), 1);
}

TEST(ShortPrefillSplits, FewestWavesPerSplitOverShapes) {
  for (int64_t slots : {16, 78, 114, 132}) {
    for (int64_t units = 1; units <= 3 * slots; ++units) {
      for (int32_t most = 1; most <= 16; ++most) {
        const int32_t got = short_prefill_splits(units, slots, 1000, most);
        ASSERT_EQ(short_prefill_splits(units, slots, 255, most), 1);  // short requests
        SCOPED_TRACE(testing::Message() << "slots " << slots << " units " << units << " most "
                                        << most);
        ASSERT_GE(got, 1);
        ASSERT_LE(got, std::min(4, most));
        if (units * 2 <= slots || units > 2 * slots) {
          ASSERT_EQ(got, 1);
          continue;
        }
        auto waves_per_split = [&](int64_t k) {
          return static_cast<double>((k * units + slots - 1) / slots) / k;
        };
        for (int32_t k = 1; k <= std::min(4, most); ++k) {
          ASSERT_LE(waves_per_split(got), waves_per_split(k));
          if (k < got) ASSERT_LT(waves_per_split(got), waves_per_split(k));  // fewest on a tie
        }
      }
    }
  }
}

}  // namespace
