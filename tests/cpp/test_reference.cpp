// The CPU backend through the C ABI against a naive double-precision evaluation of the contract
// (test_case.h), on flat and paged layouts, every K/V dtype, all q_offset modes, and the edge
// cases of section 4: empty selections, out-of-range ids, invalid page ids, rows in no request.
#include <gtest/gtest.h>
#include <stdint.h>
#include <string.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test_case.h"

namespace flashmsa_test {
namespace {

struct NamedCase {
  std::string name;
  CaseOptions options;
};

// Checks every output of `result` against `expected`: out within the rounding of q's dtype on
// top of fp32 error, lse/lse_t within fp32 error, -inf exactly where the reference is -inf.
void expect_matches(const Result& result, const Expected& expected, flashmsa_dtype q_dtype,
                    const std::string& what) {
  ASSERT_EQ(result.status, FLASHMSA_OK) << what << ": " << result.error;
  const double relative = q_dtype == FLASHMSA_DTYPE_BF16 ? 1.0 / 256 : 1.0 / 1024;
  int reported = 0;
  for (size_t n = 0; n < expected.out.size() && reported < 5; ++n) {
    const double got = result.out[n], want = expected.out[n];
    if (!(std::fabs(got - want) <= 2e-4 + relative * std::fabs(want))) {
      ADD_FAILURE() << what << ": out[" << n / kHeadDim << " (row*Hq+head)][" << n % kHeadDim
                    << "] = " << got << ", expected " << want;
      ++reported;
    }
  }
  for (size_t n = 0; n < expected.lse.size() && reported < 5; ++n) {
    const double pairs[2][2] = {{result.lse[n], expected.lse[n]},
                                {result.lse_t[n], expected.lse_t[n]}};
    for (int which = 0; which < 2; ++which) {
      const double got = pairs[which][0], want = pairs[which][1];
      const bool ok = std::isinf(want)
                          ? got == want
                          : std::fabs(got - want) <= 1e-4 * std::max(1.0, std::fabs(want));
      if (!ok) {
        ADD_FAILURE() << what << ": " << (which ? "lse_t[" : "lse[") << n
                      << " (row*Hq+head)] = " << got << ", expected " << want;
        ++reported;
      }
    }
  }
}

void expect_bitwise_equal(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.status, FLASHMSA_OK) << what << ": " << a.error;
  ASSERT_EQ(b.status, FLASHMSA_OK) << what << ": " << b.error;
  EXPECT_EQ(a.out_bits, b.out_bits) << what << ": out differs";
  EXPECT_EQ(0, memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)))
      << what << ": lse differs";
  EXPECT_EQ(0, memcmp(a.lse_t.data(), b.lse_t.data(), a.lse_t.size() * sizeof(float)))
      << what << ": lse_t differs";
}

std::vector<NamedCase> reference_cases() {
  std::vector<NamedCase> cases;
  CaseOptions o;
  o.q_lens = {5, 1, 40};
  o.k_lens = {300, 129, 700};
  cases.push_back({"bf16_causal_end_aligned", o});

  o = CaseOptions{};
  o.q_lens = {17, 30};
  o.k_lens = {129, 500};
  o.num_qo_heads = 6;  // group of 3
  o.num_kv_heads = 2;
  o.topk = 3;
  o.causal = false;
  o.seed = 2;
  cases.push_back({"bf16_noncausal_group3", o});

  o = CaseOptions{};
  o.q_lens = {20, 7};
  o.k_lens = {250, 600};
  o.q_dtype = o.kv_dtype = FLASHMSA_DTYPE_FP16;
  o.q_offset_mode = FLASHMSA_Q_OFFSET_SCALAR;
  o.q_offset_value = 100;
  o.softmax_scale = 0.05f;
  o.lse_temperature_scale = 0.5f;
  o.seed = 3;
  cases.push_back({"fp16_causal_scalar_offset_temperature", o});

  o = CaseOptions{};
  o.q_lens = {12, 6, 9};
  o.k_lens = {400, 300, 260};
  o.q_dtype = o.kv_dtype = FLASHMSA_DTYPE_FP16;
  o.q_offset_mode = FLASHMSA_Q_OFFSET_PER_REQUEST;
  o.q_offset_per_request = {-5, 1000, 130};  // negative positions read nothing
  o.lse_temperature_scale = 2.0f;
  o.seed = 4;
  cases.push_back({"fp16_causal_per_request_offset", o});

  o = CaseOptions{};
  o.q_lens = {9, 33};
  o.k_lens = {1000, 385};
  o.num_qo_heads = 8;  // one KV head for all 8 query heads
  o.num_kv_heads = 1;
  o.topk = 16;
  o.kv_dtype = FLASHMSA_DTYPE_FP8_E4M3;
  o.k_global_scale = 0.7f;
  o.v_global_scale = 1.3f;
  o.seed = 5;
  cases.push_back({"fp8_global_scales_group8", o});

  o = CaseOptions{};
  o.q_lens = {7, 12};
  o.k_lens = {700, 260};
  o.num_qo_heads = 16;  // group 8
  o.topk = 16;
  o.kv_dtype = FLASHMSA_DTYPE_FP8_E4M3;
  o.token_scales = true;
  o.k_global_scale = 0.7f;
  o.v_global_scale = 1.3f;
  o.seed = 12;
  cases.push_back({"fp8_token_scales_global_scales", o});

  o = CaseOptions{};
  o.q_lens = {8, 21};
  o.k_lens = {513, 200};
  o.q_dtype = FLASHMSA_DTYPE_FP16;
  o.kv_dtype = FLASHMSA_DTYPE_NVFP4;
  o.k_global_scale = 0.5f;
  o.v_global_scale = 2.0f;
  o.seed = 6;
  cases.push_back({"nvfp4_fp16_global_scales", o});

  o = CaseOptions{};
  o.q_lens = {1, 1, 1, 1, 1, 1};
  o.k_lens = {0, 1, 128, 129, 1000, 257};  // an empty request, single-key request, exact pages
  o.num_qo_heads = 8;
  o.num_kv_heads = 2;
  o.topk = 8;
  o.seed = 7;
  cases.push_back({"bf16_decode_edge_lengths", o});

  o = CaseOptions{};
  o.q_lens = {3, 9};
  o.k_lens = {1111, 2222};
  o.num_qo_heads = o.num_kv_heads = 2;
  o.topk = 64;
  o.seed = 8;
  cases.push_back({"bf16_topk64_no_grouping", o});

  o = CaseOptions{};
  o.q_lens = {4, 5};
  o.k_lens = {300, 140};
  o.extra_q_rows = 3;  // rows past cu_seqlens_q[B] belong to no request and read nothing
  o.seed = 9;
  cases.push_back({"bf16_rows_outside_requests", o});
  return cases;
}

void PrintTo(const NamedCase& named_case, std::ostream* os) { *os << named_case.name; }

class ReferenceCase : public ::testing::TestWithParam<NamedCase> {};

TEST_P(ReferenceCase, FlatMatchesNaive) {
  TestCase test_case(GetParam().options);
  expect_matches(test_case.run(false), test_case.expected(false), GetParam().options.q_dtype,
                 GetParam().name + " flat");
}

TEST_P(ReferenceCase, PagedMatchesNaive) {
  TestCase test_case(GetParam().options);
  expect_matches(test_case.run(true), test_case.expected(true), GetParam().options.q_dtype,
                 GetParam().name + " paged");
}

TEST_P(ReferenceCase, PagedIsBitwiseEqualToFlat) {
  TestCase test_case(GetParam().options);
  expect_bitwise_equal(test_case.run(false), test_case.run(true),
                       GetParam().name + " paged vs flat");
}

TEST_P(ReferenceCase, RepeatedRunsAreBitwiseEqual) {
  TestCase test_case(GetParam().options);
  expect_bitwise_equal(test_case.run(true), test_case.run(true), GetParam().name + " rerun");
}

INSTANTIATE_TEST_SUITE_P(Contract, ReferenceCase, ::testing::ValuesIn(reference_cases()),
                         [](const ::testing::TestParamInfo<NamedCase>& info) {
                           return info.param.name;
                         });

CaseOptions small_case() {
  CaseOptions o;
  o.q_lens = {6, 10};
  o.k_lens = {260, 400};
  o.seed = 11;
  return o;
}

// Every output of (row, every query head) is exactly 0 with lse = lse_t = -inf.
void expect_row_reads_nothing(const Result& result, int row, int num_qo_heads,
                              const std::string& what) {
  ASSERT_EQ(result.status, FLASHMSA_OK) << what << ": " << result.error;
  const float negative_infinity = -std::numeric_limits<float>::infinity();
  for (int head = 0; head < num_qo_heads; ++head) {
    for (int d = 0; d < kHeadDim; ++d) {
      ASSERT_EQ(result.out_bits[(static_cast<size_t>(row) * num_qo_heads + head) * kHeadDim + d], 0)
          << what << ": head " << head << " dim " << d << " is not +0";
    }
    EXPECT_EQ(result.lse[row * num_qo_heads + head], negative_infinity) << what << " lse";
    EXPECT_EQ(result.lse_t[row * num_qo_heads + head], negative_infinity) << what << " lse_t";
  }
}

TEST(ReferenceEdges, RowWhoseListStartsNegativeReadsNothing) {
  const CaseOptions options = small_case();
  TestCase test_case(options);
  const int row = 8;  // request 1, local row 2
  for (int h = 0; h < options.num_kv_heads; ++h) {
    test_case.index(h, row, 0) = -1;
    test_case.index(h, row, 1) = 0;  // after the first negative: ignored
  }
  for (bool paged : {false, true}) {
    const std::string what = paged ? "leading -1, paged" : "leading -1, flat";
    const Result result = test_case.run(paged);
    expect_row_reads_nothing(result, row, options.num_qo_heads, what);
    expect_matches(result, test_case.expected(paged), options.q_dtype, what);
  }
}

TEST(ReferenceEdges, RowWithOnlyOutOfRangeIdsReadsNothing) {
  const CaseOptions options = small_case();
  TestCase test_case(options);
  const int row = 2;  // request 0: 3 blocks
  for (int h = 0; h < options.num_kv_heads; ++h) {
    for (int slot = 0; slot < options.topk; ++slot) test_case.index(h, row, slot) = 3 + slot * 1000;
  }
  for (bool paged : {false, true}) {
    expect_row_reads_nothing(test_case.run(paged), row, options.num_qo_heads,
                             paged ? "out-of-range ids, paged" : "out-of-range ids, flat");
  }
}

TEST(ReferenceEdges, InvalidPageIdsSelectNothing) {
  const CaseOptions options = small_case();
  TestCase test_case(options);
  test_case.page_table_entry(0, 1) = 1 << 30;  // past num_pages
  test_case.page_table_entry(1, 0) = -7;
  expect_matches(test_case.run(true), test_case.expected(true), options.q_dtype,
                 "corrupted page table");
}

TEST(ReferenceEdges, CausalQueryBeforeEveryKeyReadsNothing) {
  CaseOptions options = small_case();
  options.q_offset_mode = FLASHMSA_Q_OFFSET_SCALAR;
  options.q_offset_value = -3;  // rows 0..2 of each request sit at negative positions
  TestCase test_case(options);
  const Result result = test_case.run(false);
  expect_row_reads_nothing(result, 0, options.num_qo_heads, "position -3");
  expect_row_reads_nothing(result, 8, options.num_qo_heads, "position -1");
  expect_matches(result, test_case.expected(false), options.q_dtype, "negative offset");
}

TEST(ReferenceEdges, HugeScalarOffsetSeesEveryKey) {
  CaseOptions options = small_case();
  options.q_offset_mode = FLASHMSA_Q_OFFSET_SCALAR;
  // Far past every key; the library must not overflow computing position + 1.
  options.q_offset_value = std::numeric_limits<int64_t>::max() - 64;
  TestCase test_case(options);
  expect_matches(test_case.run(true), test_case.expected(true), options.q_dtype,
                 "q_offset INT64_MAX");
}

TEST(ReferenceEdges, EmptyBatchSucceeds) {
  CaseOptions options;
  options.extra_q_rows = 2;  // no request at all: both rows read nothing
  TestCase test_case(options);
  const Result result = test_case.run(false);
  expect_row_reads_nothing(result, 0, options.num_qo_heads, "batch 0, row 0");
  expect_row_reads_nothing(result, 1, options.num_qo_heads, "batch 0, row 1");
}

// Section 4: no index value, however wrong, may cause an out-of-bounds read or a crash. The
// sanitizer build (ASan) turns any such read into a failure; here the call must just succeed.
TEST(ReferenceEdges, GarbageDeviceValuesAreHandledSafely) {
  const int32_t extremes[] = {std::numeric_limits<int32_t>::min(), -1, 0, 1, 127, 128, 129,
                              std::numeric_limits<int32_t>::max()};
  std::mt19937 rng(12);
  auto garbage = [&]() -> int32_t {
    if (rng() % 2) return extremes[rng() % 8];
    return static_cast<int32_t>(rng() % 1200) - 100;
  };
  for (int trial = 0; trial < 40; ++trial) {
    CaseOptions options = small_case();
    options.q_offset_mode = FLASHMSA_Q_OFFSET_PER_REQUEST;
    options.q_offset_per_request = {0, 0};
    options.seed = 100 + trial;
    TestCase test_case(options);
    for (std::vector<int32_t>* values :
         {&test_case.cu_seqlens_q(), &test_case.cu_seqlens_k(), &test_case.seqused_k(),
          &test_case.page_table(), &test_case.indices(), &test_case.q_offset_per_request()}) {
      for (int32_t& value : *values) {
        if (rng() % 3 == 0) value = garbage();
      }
    }
    for (bool paged : {false, true}) {
      const Result result = test_case.run(paged);
      EXPECT_EQ(result.status, FLASHMSA_OK) << "trial " << trial << (paged ? " paged" : " flat");
    }
  }
}

// Contract section 6: global scales the caller keeps in memory replace the float fields; the
// arithmetic is the float form's, so the output is bitwise the same.
TEST(ReferenceScales, GlobalScalesInMemoryMatchTheFloatsBitwise) {
  for (const flashmsa_dtype kv_dtype : {FLASHMSA_DTYPE_FP8_E4M3, FLASHMSA_DTYPE_BF16}) {
    CaseOptions options = small_case();
    options.kv_dtype = kv_dtype;
    options.k_global_scale = 0.7f;
    options.v_global_scale = 2.0f;
    TestCase test_case(options);
    for (bool paged : {false, true}) {
      const std::string what = std::string(kv_dtype == FLASHMSA_DTYPE_BF16 ? "bf16" : "fp8") +
                               (paged ? " paged" : " flat") + " global scales in memory";
      const Result from_floats = test_case.run(paged);
      const float k_global_scale = options.k_global_scale, v_global_scale = options.v_global_scale;
      flashmsa_args args = test_case.args(paged);
      args.k_global_scale = args.v_global_scale = 1.0f;
      args.k_global_scale_device = &k_global_scale;
      args.v_global_scale_device = &v_global_scale;
      const Result from_memory = test_case.run(args);
      expect_bitwise_equal(from_memory, from_floats, what);
      expect_matches(from_memory, test_case.expected(paged), options.q_dtype, what);
    }
  }
}

// Contract section 6: page-local NVFP4 scales hold the same bytes as the swizzled table in
// another place; the decoded values, hence the output, are bitwise the same.
TEST(ReferenceScales, PageLocalNvfp4ScalesMatchTheSwizzledBitwise) {
  CaseOptions options = small_case();
  options.kv_dtype = FLASHMSA_DTYPE_NVFP4;
  options.q_dtype = FLASHMSA_DTYPE_FP16;
  options.k_global_scale = 0.5f;
  options.v_global_scale = 1.5f;
  TestCase test_case(options);
  const Result swizzled = test_case.run(true);
  flashmsa_args args = test_case.args(true);
  test_case.use_page_local_scales(args);
  const Result page_local = test_case.run(args);
  expect_bitwise_equal(page_local, swizzled, "page-local vs swizzled NVFP4 scales");
  expect_matches(page_local, test_case.expected(true), options.q_dtype, "page-local scales");
}

}  // namespace
}  // namespace flashmsa_test
