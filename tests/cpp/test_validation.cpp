// Host-side validation through the C ABI: one mutation of a valid call per rule, each checked
// for its status and for a last-error text that names the offending field.
#include <gtest/gtest.h>
#include <stdint.h>
#include <string.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_case.h"

namespace flashmsa_test {
namespace {

CaseOptions valid_options(flashmsa_dtype kv_dtype) {
  CaseOptions o;
  o.q_lens = {3, 4};
  o.k_lens = {200, 130};
  o.kv_dtype = kv_dtype;
  return o;
}

struct Rule {
  std::string name;
  bool paged;
  flashmsa_dtype kv_dtype;
  std::function<void(flashmsa_args&)> mutate;
  flashmsa_status status;
  std::string field;  // flashmsa_last_error() must start with "field:"
};

// Stores a raw int into a C enum field, as a C or ctypes caller may (a C++ cast to an
// out-of-range enum value would itself be undefined).
template <typename Enum>
void set_raw(Enum& field, int value) {
  memcpy(&field, &value, sizeof(value));
}

const uint8_t kScaleBytes[4] = {0, 0, 0, 0};
const int32_t kSomeInt32[4] = {0, 0, 0, 0};
const float kOne = 1.0f;

// Page-local NVFP4 scales with valid strides (valid_options' 2 KV heads), for the rules that
// then break one of them. Validation fails before any byte is read.
void use_page_local_scales(flashmsa_args& a) {
  a.nvfp4_scale_layout = FLASHMSA_NVFP4_SCALES_PAGE_LOCAL;
  a.k_scale_stride_head = a.v_scale_stride_head = 1024;
  a.k_scale_stride_page = a.v_scale_stride_page = 2048;
}

// Per-token fp8 scales with the given slot count and row stride, for the rules that break one
// of them. Validation fails before any scale is read, so one float stands in for the tensor.
void set_token_scale(flashmsa_args& a, bool is_key, int64_t slots, int64_t stride_head) {
  (is_key ? a.k_token_scale : a.v_token_scale) = &kOne;
  (is_key ? a.k_token_scale_slots : a.v_token_scale_slots) = slots;
  (is_key ? a.k_token_scale_stride_head : a.v_token_scale_stride_head) = stride_head;
}

std::vector<Rule> rules() {
  const flashmsa_dtype bf16 = FLASHMSA_DTYPE_BF16, nvfp4 = FLASHMSA_DTYPE_NVFP4,
                       fp8 = FLASHMSA_DTYPE_FP8_E4M3;
  const flashmsa_status invalid = FLASHMSA_ERROR_INVALID_ARGUMENT;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  return {
      {"bad_device", false, bf16, [](flashmsa_args& a) { set_raw(a.device, 7); }, invalid,
       "device"},
      {"negative_cuda_device_index", false, bf16,
       [](flashmsa_args& a) {
         a.device = FLASHMSA_DEVICE_CUDA;
         a.device_index = -1;
       },
       invalid, "device_index"},
      {"q_dtype_unknown", false, bf16, [](flashmsa_args& a) { set_raw(a.q_dtype, -1); }, invalid,
       "q_dtype"},
      {"q_dtype_fp8", false, bf16, [](flashmsa_args& a) { a.q_dtype = FLASHMSA_DTYPE_FP8_E4M3; },
       invalid, "q_dtype"},
      {"kv_dtype_other_half", false, bf16,
       [](flashmsa_args& a) { a.kv_dtype = FLASHMSA_DTYPE_FP16; }, invalid, "kv_dtype"},
      {"kv_dtype_unknown", false, bf16, [](flashmsa_args& a) { set_raw(a.kv_dtype, 9); }, invalid,
       "kv_dtype"},
      {"head_dim_64_not_supported", false, bf16, [](flashmsa_args& a) { a.head_dim = 64; },
       FLASHMSA_ERROR_NOT_SUPPORTED, "head_dim"},
      {"head_dim_zero", false, bf16, [](flashmsa_args& a) { a.head_dim = 0; }, invalid, "head_dim"},
      {"num_qo_heads_zero", false, bf16, [](flashmsa_args& a) { a.num_qo_heads = 0; }, invalid,
       "num_qo_heads"},
      {"num_kv_heads_zero", false, bf16, [](flashmsa_args& a) { a.num_kv_heads = 0; }, invalid,
       "num_kv_heads"},
      {"heads_not_divisible", false, bf16, [](flashmsa_args& a) { a.num_kv_heads = 3; }, invalid,
       "num_qo_heads"},
      {"topk_zero", false, bf16, [](flashmsa_args& a) { a.topk = 0; }, invalid, "topk"},
      {"topk_65", false, bf16, [](flashmsa_args& a) { a.topk = 65; }, invalid, "topk"},
      {"negative_batch", false, bf16, [](flashmsa_args& a) { a.batch_size = -1; }, invalid,
       "batch_size"},
      {"negative_total_q", false, bf16, [](flashmsa_args& a) { a.total_q = -1; }, invalid,
       "total_q"},
      {"is_paged_not_a_flag", false, bf16, [](flashmsa_args& a) { a.is_paged = 2; }, invalid,
       "is_paged"},
      {"flat_negative_total_k", false, bf16, [](flashmsa_args& a) { a.total_k = -1; }, invalid,
       "total_k"},
      {"flat_without_cu_seqlens_k", false, bf16, [](flashmsa_args& a) { a.cu_seqlens_k = nullptr; },
       invalid, "cu_seqlens_k"},
      {"flat_with_seqused_k", false, bf16, [](flashmsa_args& a) { a.seqused_k = kSomeInt32; },
       invalid, "seqused_k"},
      {"flat_with_page_table", false, bf16, [](flashmsa_args& a) { a.page_table = kSomeInt32; },
       invalid, "page_table"},
      {"paged_with_cu_seqlens_k", true, bf16, [](flashmsa_args& a) { a.cu_seqlens_k = kSomeInt32; },
       invalid, "cu_seqlens_k"},
      {"paged_without_seqused_k", true, bf16, [](flashmsa_args& a) { a.seqused_k = nullptr; },
       invalid, "seqused_k"},
      {"paged_without_page_table", true, bf16, [](flashmsa_args& a) { a.page_table = nullptr; },
       invalid, "page_table"},
      {"paged_negative_num_pages", true, bf16, [](flashmsa_args& a) { a.num_pages = -2; }, invalid,
       "num_pages"},
      {"paged_negative_max_pages", true, bf16,
       [](flashmsa_args& a) { a.max_pages_per_request = -1; }, invalid, "max_pages_per_request"},
      {"null_cu_seqlens_q", false, bf16, [](flashmsa_args& a) { a.cu_seqlens_q = nullptr; },
       invalid, "cu_seqlens_q"},
      {"null_q", false, bf16, [](flashmsa_args& a) { a.q = nullptr; }, invalid, "q"},
      {"null_indices", false, bf16, [](flashmsa_args& a) { a.q2k_indices = nullptr; }, invalid,
       "q2k_indices"},
      {"null_k", false, bf16, [](flashmsa_args& a) { a.k = nullptr; }, invalid, "k"},
      {"null_v_paged", true, bf16, [](flashmsa_args& a) { a.v = nullptr; }, invalid, "v"},
      {"nvfp4_without_k_scale", false, nvfp4, [](flashmsa_args& a) { a.k_scale = nullptr; },
       invalid, "k_scale"},
      {"nvfp4_without_v_scale", true, nvfp4, [](flashmsa_args& a) { a.v_scale = nullptr; }, invalid,
       "v_scale"},
      {"nvfp4_short_k_scale", false, nvfp4, [](flashmsa_args& a) { a.k_scale_bytes -= 1; }, invalid,
       "k_scale_bytes"},
      {"nvfp4_short_v_scale_paged", true, nvfp4, [](flashmsa_args& a) { a.v_scale_bytes = 1024; },
       invalid, "v_scale_bytes"},
      {"k_scale_on_bf16", false, bf16, [](flashmsa_args& a) { a.k_scale = kScaleBytes; }, invalid,
       "k_scale"},
      {"v_scale_on_bf16", true, bf16, [](flashmsa_args& a) { a.v_scale = kScaleBytes; }, invalid,
       "v_scale"},
      {"nvfp4_scale_layout_unknown", true, nvfp4,
       [](flashmsa_args& a) { set_raw(a.nvfp4_scale_layout, 2); }, invalid, "nvfp4_scale_layout"},
      {"page_local_scales_on_bf16", true, bf16, [](flashmsa_args& a) { use_page_local_scales(a); },
       invalid, "nvfp4_scale_layout"},
      {"page_local_scales_on_flat_kv", false, nvfp4,
       [](flashmsa_args& a) { use_page_local_scales(a); }, invalid, "nvfp4_scale_layout"},
      {"page_local_without_v_scale", true, nvfp4,
       [](flashmsa_args& a) {
         use_page_local_scales(a);
         a.v_scale = nullptr;
       },
       invalid, "v_scale"},
      {"page_local_k_scale_page_stride_unaligned", true, nvfp4,
       [](flashmsa_args& a) {
         use_page_local_scales(a);
         a.k_scale_stride_page = 2056;
       },
       invalid, "k_scale_stride_page"},
      {"page_local_v_scale_head_stride_negative", true, nvfp4,
       [](flashmsa_args& a) {
         use_page_local_scales(a);
         a.v_scale_stride_head = -1024;
       },
       invalid, "v_scale_stride_head"},
      {"page_local_k_token_stride_not_d_over_2", true, nvfp4,
       [](flashmsa_args& a) {
         use_page_local_scales(a);
         a.k_stride_token = 128;
       },
       invalid, "k_stride_token"},
      {"page_local_v_head_stride_unaligned", true, nvfp4,
       [](flashmsa_args& a) {
         use_page_local_scales(a);
         a.v_stride_head += 8;
       },
       invalid, "v_stride_head"},
      {"k_token_scale_on_bf16_kv", false, bf16,
       [](flashmsa_args& a) { set_token_scale(a, true, a.total_k, a.total_k); }, invalid,
       "k_token_scale"},
      {"v_token_scale_on_nvfp4_kv", true, nvfp4,
       [](flashmsa_args& a) {
         set_token_scale(a, false, a.num_pages * 128, a.num_pages * 128);
       },
       invalid, "v_token_scale"},
      {"k_token_scale_fewer_slots_than_flat_keys", false, fp8,
       [](flashmsa_args& a) { set_token_scale(a, true, a.total_k - 1, a.total_k); }, invalid,
       "k_token_scale_slots"},
      {"v_token_scale_fewer_slots_than_pages", true, fp8,
       [](flashmsa_args& a) {
         set_token_scale(a, false, a.num_pages * 128 - 1, a.num_pages * 128);
       },
       invalid, "v_token_scale_slots"},
      {"k_token_scale_rows_overlap", true, fp8,
       [](flashmsa_args& a) {
         set_token_scale(a, true, a.num_pages * 128, a.num_pages * 128 - 1);
       },
       invalid, "k_token_scale_stride_head"},
      {"v_token_scale_rows_overlap", false, fp8,
       [](flashmsa_args& a) { set_token_scale(a, false, a.total_k + 7, a.total_k); }, invalid,
       "v_token_scale_stride_head"},
      {"softmax_scale_nan", false, bf16, [nan](flashmsa_args& a) { a.softmax_scale = nan; },
       invalid, "softmax_scale"},
      {"k_global_scale_inf", false, bf16, [inf](flashmsa_args& a) { a.k_global_scale = inf; },
       invalid, "k_global_scale"},
      {"v_global_scale_nan", false, bf16, [nan](flashmsa_args& a) { a.v_global_scale = nan; },
       invalid, "v_global_scale"},
      {"k_global_scale_beside_one_in_memory", false, bf16,
       [](flashmsa_args& a) {
         a.k_global_scale_device = &kOne;
         a.k_global_scale = 0.5f;
       },
       invalid, "k_global_scale"},
      {"v_global_scale_beside_one_in_memory", true, bf16,
       [](flashmsa_args& a) {
         a.v_global_scale_device = &kOne;
         a.v_global_scale = 2.0f;
       },
       invalid, "v_global_scale"},
      {"temperature_zero", false, bf16, [](flashmsa_args& a) { a.lse_temperature_scale = 0; },
       invalid, "lse_temperature_scale"},
      {"temperature_negative", false, bf16, [](flashmsa_args& a) { a.lse_temperature_scale = -1; },
       invalid, "lse_temperature_scale"},
      {"temperature_inf", false, bf16, [inf](flashmsa_args& a) { a.lse_temperature_scale = inf; },
       invalid, "lse_temperature_scale"},
      {"causal_not_a_flag", false, bf16, [](flashmsa_args& a) { a.causal = 3; }, invalid, "causal"},
      {"causal_entry_limit_not_a_flag", false, bf16,
       [](flashmsa_args& a) { a.causal = 1; a.causal_entry_limit = 2; }, invalid,
       "causal_entry_limit"},
      {"causal_entry_limit_without_causal", false, bf16,
       [](flashmsa_args& a) { a.causal = 0; a.causal_entry_limit = 1; }, invalid,
       "causal_entry_limit"},
      {"q_offset_mode_unknown", false, bf16, [](flashmsa_args& a) { set_raw(a.q_offset_mode, 3); },
       invalid, "q_offset_mode"},
      {"per_request_offset_without_pointer", false, bf16,
       [](flashmsa_args& a) { a.q_offset_mode = FLASHMSA_Q_OFFSET_PER_REQUEST; }, invalid,
       "q_offset_per_request"},
      {"offset_pointer_without_per_request_mode", false, bf16,
       [](flashmsa_args& a) { a.q_offset_per_request = kSomeInt32; }, invalid,
       "q_offset_per_request"},
      {"null_out", false, bf16, [](flashmsa_args& a) { a.out = nullptr; }, invalid, "out"},
      {"workspace_bytes_without_workspace", false, bf16,
       [](flashmsa_args& a) { a.workspace_bytes = 16; }, invalid, "workspace"},
  };
}

void PrintTo(const Rule& rule, std::ostream* os) { *os << rule.name; }

class ValidationRule : public ::testing::TestWithParam<Rule> {};

TEST_P(ValidationRule, RejectsWithStatusNamingTheField) {
  const Rule& rule = GetParam();
  TestCase test_case(valid_options(rule.kv_dtype));
  flashmsa_args args = test_case.args(rule.paged);
  ASSERT_EQ(flashmsa_sparse_attention(&args), FLASHMSA_OK)
      << rule.name << ": the unmutated call must succeed: " << flashmsa_last_error();
  args = test_case.args(rule.paged);
  rule.mutate(args);
  EXPECT_EQ(flashmsa_sparse_attention(&args), rule.status) << rule.name;
  // Every message starts with the field it is about: "field: expected ..., got ...".
  const std::string error = flashmsa_last_error();
  EXPECT_EQ(error.rfind(rule.field + ":", 0), 0u)
      << rule.name << ": message \"" << error << "\" does not start with " << rule.field;
  size_t bytes = 12345;
  EXPECT_EQ(flashmsa_workspace_bytes(&args, &bytes), rule.status) << rule.name << " (workspace)";
}

INSTANTIATE_TEST_SUITE_P(Rules, ValidationRule, ::testing::ValuesIn(rules()),
                         [](const ::testing::TestParamInfo<Rule>& info) {
                           return info.param.name;
                         });

TEST(Validation, NullArgsIsInvalid) {
  EXPECT_EQ(flashmsa_sparse_attention(nullptr), FLASHMSA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashmsa_last_error()).find("args"), std::string::npos);
  size_t bytes = 0;
  EXPECT_EQ(flashmsa_workspace_bytes(nullptr, &bytes), FLASHMSA_ERROR_INVALID_ARGUMENT);
}

TEST(Validation, NullBytesPointerIsInvalid) {
  TestCase test_case(valid_options(FLASHMSA_DTYPE_BF16));
  flashmsa_args args = test_case.args(false);
  EXPECT_EQ(flashmsa_workspace_bytes(&args, nullptr), FLASHMSA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashmsa_last_error()).find("bytes"), std::string::npos);
}

TEST(Validation, SuccessClearsLastError) {
  EXPECT_EQ(flashmsa_sparse_attention(nullptr), FLASHMSA_ERROR_INVALID_ARGUMENT);
  EXPECT_STRNE(flashmsa_last_error(), "");
  TestCase test_case(valid_options(FLASHMSA_DTYPE_BF16));
  flashmsa_args args = test_case.args(false);
  EXPECT_EQ(flashmsa_sparse_attention(&args), FLASHMSA_OK);
  EXPECT_STREQ(flashmsa_last_error(), "");
}

TEST(Validation, CpuWorkspaceIsZeroBytes) {
  TestCase test_case(valid_options(FLASHMSA_DTYPE_NVFP4));
  flashmsa_args args = test_case.args(true);
  size_t bytes = 99;
  EXPECT_EQ(flashmsa_workspace_bytes(&args, &bytes), FLASHMSA_OK) << flashmsa_last_error();
  EXPECT_EQ(bytes, 0u);
}

TEST(Validation, CudaCallOnCpuOnlyBuildIsNotSupported) {
  if (flashmsa_has_cuda()) GTEST_SKIP() << "this build has the CUDA kernels";
  TestCase test_case(valid_options(FLASHMSA_DTYPE_BF16));
  flashmsa_args args = test_case.args(false);
  args.device = FLASHMSA_DEVICE_CUDA;
  EXPECT_EQ(flashmsa_sparse_attention(&args), FLASHMSA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(std::string(flashmsa_last_error()).find("CUDA"), std::string::npos);
  size_t bytes = 0;
  EXPECT_EQ(flashmsa_workspace_bytes(&args, &bytes), FLASHMSA_ERROR_NOT_SUPPORTED);
}

// The Hopper kernels do not implement per-token scales yet: a CUDA call with them is refused,
// naming them, before the build or the device is asked about.
TEST(Validation, EmptyTensorsMayBeNull) {
  // total_q = 0 and no K/V rows: torch gives data_ptr() == 0 for empty tensors.
  flashmsa_args args;
  flashmsa_args_init(&args);
  const int32_t cu_seqlens[1] = {0};
  args.head_dim = 128;
  args.num_qo_heads = args.num_kv_heads = 1;
  args.topk = 1;
  args.cu_seqlens_q = cu_seqlens;
  args.cu_seqlens_k = cu_seqlens;
  EXPECT_EQ(flashmsa_sparse_attention(&args), FLASHMSA_OK) << flashmsa_last_error();
}

TEST(Validation, ArgsInitDefaults) {
  flashmsa_args args;
  memset(&args, 0xA5, sizeof(args));
  flashmsa_args_init(&args);
  EXPECT_EQ(args.device, FLASHMSA_DEVICE_CPU);
  EXPECT_EQ(args.stream, nullptr);
  EXPECT_EQ(args.q, nullptr);
  EXPECT_EQ(args.out, nullptr);
  EXPECT_EQ(args.workspace, nullptr);
  EXPECT_EQ(args.workspace_bytes, 0u);
  EXPECT_EQ(args.batch_size, 0);
  EXPECT_EQ(args.causal, 0);
  EXPECT_EQ(args.q_offset_mode, FLASHMSA_Q_OFFSET_END_ALIGNED);
  EXPECT_FLOAT_EQ(args.softmax_scale, 1.0f / std::sqrt(128.0f));
  EXPECT_EQ(args.k_global_scale, 1.0f);
  EXPECT_EQ(args.v_global_scale, 1.0f);
  EXPECT_EQ(args.lse_temperature_scale, 1.0f);
  EXPECT_EQ(args.k_global_scale_device, nullptr);
  EXPECT_EQ(args.v_global_scale_device, nullptr);
  EXPECT_EQ(args.k_token_scale, nullptr);
  EXPECT_EQ(args.v_token_scale, nullptr);
  EXPECT_EQ(args.nvfp4_scale_layout, FLASHMSA_NVFP4_SCALES_SWIZZLED);
  EXPECT_EQ(args.k_scale_stride_page, 0);
  EXPECT_EQ(args.v_scale_stride_head, 0);
  EXPECT_EQ(flashmsa_abi_version(), FLASHMSA_ABI_VERSION);
  EXPECT_EQ(FLASHMSA_ABI_VERSION, 3);
}

}  // namespace
}  // namespace flashmsa_test
