// Host-side validation of flashmsa_args. The checks run in the order of the struct's concerns
// (device, dtypes, sizes, layout, pointers, block scales, token scales, numerics, masking,
// outputs, workspace) so that a call with several mistakes always reports the same, first one.
//
// Pointers to tensors with no elements may be NULL (an empty torch tensor's data_ptr() is 0),
// so "required" below means "required when the tensor has elements".
#include "api/validate.h"


#include <cmath>
#include <string>

#include "api/field_checks.h"
#include "common/error.h"
#include "common/nvfp4.h"

namespace flashmsa {
namespace {

constexpr int64_t kSupportedHeadDim = 128;
constexpr int64_t kMaxTopk = 64;

void require_finite(float value, const char* field) {
  if (!std::isfinite(value)) fail_field(field, "a finite value", value);
}

std::string dtype_name(int dtype) {
  switch (dtype) {
    case FLASHMSA_DTYPE_BF16:
      return "BF16";
    case FLASHMSA_DTYPE_FP16:
      return "FP16";
    case FLASHMSA_DTYPE_FP8_E4M3:
      return "FP8_E4M3";
    case FLASHMSA_DTYPE_NVFP4:
      return "NVFP4";
    default:
      return "unknown dtype " + std::to_string(dtype);
  }
}

void validate_device(const flashmsa_args& args) {
  const int device = raw_enum(args.device);
  if (device != FLASHMSA_DEVICE_CPU && device != FLASHMSA_DEVICE_CUDA) {
    fail_field("device", "FLASHMSA_DEVICE_CPU (0) or FLASHMSA_DEVICE_CUDA (1)", device);
  }
  if (device == FLASHMSA_DEVICE_CUDA && args.device_index < 0) {
    fail_field("device_index", "a CUDA device ordinal >= 0", args.device_index);
  }
}

void validate_dtypes(const flashmsa_args& args) {
  const int q_dtype = raw_enum(args.q_dtype), kv_dtype = raw_enum(args.kv_dtype);
  if (q_dtype != FLASHMSA_DTYPE_BF16 && q_dtype != FLASHMSA_DTYPE_FP16) {
    fail_field("q_dtype", "BF16 or FP16", dtype_name(q_dtype));
  }
  if (kv_dtype != q_dtype && kv_dtype != FLASHMSA_DTYPE_FP8_E4M3 &&
      kv_dtype != FLASHMSA_DTYPE_NVFP4) {
    fail_field("kv_dtype", "q's dtype (" + dtype_name(q_dtype) + "), FP8_E4M3 or NVFP4",
               dtype_name(kv_dtype));
  }
}

void validate_sizes(const flashmsa_args& args) {
  if (args.head_dim <= 0) fail_field("head_dim", "128", args.head_dim);
  if (args.head_dim != kSupportedHeadDim) {
    fail_not_supported("head_dim: only 128 is supported, got " + std::to_string(args.head_dim));
  }
  if (args.num_qo_heads < 1) fail_field("num_qo_heads", "a count >= 1", args.num_qo_heads);
  if (args.num_kv_heads < 1) fail_field("num_kv_heads", "a count >= 1", args.num_kv_heads);
  if (args.num_qo_heads % args.num_kv_heads != 0) {
    fail_field("num_qo_heads",
               "a multiple of num_kv_heads (" + std::to_string(args.num_kv_heads) + ")",
               args.num_qo_heads);
  }
  if (args.topk < 1 || args.topk > kMaxTopk) fail_field("topk", "a value in [1, 64]", args.topk);
  require_non_negative(args.batch_size, "batch_size");
  require_non_negative(args.total_q, "total_q");
}

// Paged and flat calls take different, mutually exclusive sequence-length arguments.
void validate_layout(const flashmsa_args& args) {
  require_flag(args.is_paged, "is_paged");
  const bool has_requests = args.batch_size > 0;
  if (args.is_paged) {
    require_non_negative(args.num_pages, "num_pages");
    require_non_negative(args.max_pages_per_request, "max_pages_per_request");
    require_null(args.cu_seqlens_k, "cu_seqlens_k", "on the paged path (seqused_k gives lengths)");
    if (has_requests) {
      require_pointer(args.seqused_k, "seqused_k", "on the paged path");
      if (args.max_pages_per_request > 0) {
        require_pointer(args.page_table, "page_table", "on the paged path");
      }
    }
  } else {
    require_non_negative(args.total_k, "total_k");
    require_pointer(args.cu_seqlens_k, "cu_seqlens_k", "on the flat path");
    require_null(args.seqused_k, "seqused_k", "on the flat path (only paged calls take it)");
    require_null(args.page_table, "page_table", "on the flat path (its presence means paged)");
  }
}

// Rows of K (and of V): tokens times KV heads, as the NVFP4 scale layout counts them.
bool kv_rows(const flashmsa_args& args, int64_t* rows) {
  if (args.is_paged) {
    int64_t page_rows = 0;
    return !__builtin_mul_overflow(args.num_pages, args.num_kv_heads, &page_rows) &&
           !__builtin_mul_overflow(page_rows, static_cast<int64_t>(kBlockSize), rows);
  }
  return !__builtin_mul_overflow(args.total_k, args.num_kv_heads, rows);
}

void validate_input_pointers(const flashmsa_args& args) {
  require_pointer(args.cu_seqlens_q, "cu_seqlens_q", "(it has batch_size + 1 entries)");
  if (args.total_q > 0) {
    require_pointer(args.q, "q", "when total_q > 0");
    require_pointer(args.q2k_indices, "q2k_indices", "when total_q > 0");
  }
  int64_t rows = 0;
  if (!kv_rows(args, &rows)) fail_invalid("total_k/num_pages: K/V row count overflows int64");
  if (rows > 0) {
    require_pointer(args.k, "k", "when K/V have rows");
    require_pointer(args.v, "v", "when K/V have rows");
  }
}

// A stride of the page-local NVFP4 form: a multiple of 16 bytes, so that planes and rows can be
// moved in 16-byte vectors. A dimension with one entry is never stepped over, so its stride is
// whatever the caller's view says.
void require_16_byte_stride(int64_t stride, int64_t extent, const char* field) {
  if (extent > 1 && (stride < 0 || stride % 16 != 0)) {
    fail_field(field, "a multiple of 16 bytes with page-local NVFP4 scales", stride);
  }
}

// Page-local scales (contract section 6): a plane of 128 * (D / 16) bytes per (page, KV head)
// at free strides, next to K/V data whose rows are D / 2 bytes apart.
void validate_page_local_scales(const flashmsa_args& args) {
  if (!args.is_paged) {
    fail_invalid("nvfp4_scale_layout: PAGE_LOCAL needs paged K/V (is_paged = 1)");
  }
  if (args.num_pages > 0) {
    require_pointer(args.k_scale, "k_scale", "when kv_dtype is NVFP4");
    require_pointer(args.v_scale, "v_scale", "when kv_dtype is NVFP4");
  }
  require_16_byte_stride(args.k_scale_stride_page, args.num_pages, "k_scale_stride_page");
  require_16_byte_stride(args.k_scale_stride_head, args.num_kv_heads, "k_scale_stride_head");
  require_16_byte_stride(args.v_scale_stride_page, args.num_pages, "v_scale_stride_page");
  require_16_byte_stride(args.v_scale_stride_head, args.num_kv_heads, "v_scale_stride_head");
  const int64_t row_bytes = args.head_dim / 2;
  const std::string expected_row =
      "D / 2 = " + std::to_string(row_bytes) + " bytes with page-local NVFP4 scales";
  if (args.k_stride_token != row_bytes) {
    fail_field("k_stride_token", expected_row, args.k_stride_token);
  }
  if (args.v_stride_token != row_bytes) {
    fail_field("v_stride_token", expected_row, args.v_stride_token);
  }
  require_16_byte_stride(args.k_stride_page, args.num_pages, "k_stride_page");
  require_16_byte_stride(args.k_stride_head, args.num_kv_heads, "k_stride_head");
  require_16_byte_stride(args.v_stride_page, args.num_pages, "v_stride_page");
  require_16_byte_stride(args.v_stride_head, args.num_kv_heads, "v_stride_head");
}

void validate_block_scales(const flashmsa_args& args) {
  const int layout = raw_enum(args.nvfp4_scale_layout);
  if (layout != FLASHMSA_NVFP4_SCALES_SWIZZLED && layout != FLASHMSA_NVFP4_SCALES_PAGE_LOCAL) {
    fail_field("nvfp4_scale_layout", "SWIZZLED (0) or PAGE_LOCAL (1)", layout);
  }
  if (args.kv_dtype != FLASHMSA_DTYPE_NVFP4) {
    require_null(args.k_scale, "k_scale", "unless kv_dtype is NVFP4");
    require_null(args.v_scale, "v_scale", "unless kv_dtype is NVFP4");
    if (layout != FLASHMSA_NVFP4_SCALES_SWIZZLED) {
      fail_invalid("nvfp4_scale_layout: must be SWIZZLED (0) unless kv_dtype is NVFP4");
    }
    return;
  }
  if (layout == FLASHMSA_NVFP4_SCALES_PAGE_LOCAL) {
    validate_page_local_scales(args);
    return;
  }
  const int64_t required = nvfp4_scale_bytes_required(args);
  if (required == 0) return;
  const std::string expected =
      "at least " + std::to_string(required) + " bytes (ceil(rows / 128) * 128 * 8 for NVFP4 K/V)";
  require_pointer(args.k_scale, "k_scale", "when kv_dtype is NVFP4");
  if (args.k_scale_bytes < required) fail_field("k_scale_bytes", expected, args.k_scale_bytes);
  require_pointer(args.v_scale, "v_scale", "when kv_dtype is NVFP4");
  if (args.v_scale_bytes < required) fail_field("v_scale_bytes", expected, args.v_scale_bytes);
}

// Slots a per-token scale row needs to cover the cache: one per (page, token in page) on the
// paged path, one per key row on the flat path (contract section 6).
int64_t token_scale_slots_required(const flashmsa_args& args) {
  if (!args.is_paged) return args.total_k;
  int64_t slots = 0;
  if (__builtin_mul_overflow(args.num_pages, static_cast<int64_t>(kBlockSize), &slots)) {
    fail_invalid("num_pages: the per-token scale slot count num_pages * 128 overflows int64");
  }
  return slots;
}

void validate_token_scale(const flashmsa_args& args, const float* scale, int64_t stride_head,
                          int64_t slots, const char* field, const char* stride_field,
                          const char* slots_field) {
  if (scale == nullptr) return;
  if (args.kv_dtype != FLASHMSA_DTYPE_FP8_E4M3) {
    fail_invalid(std::string(field) + ": must be NULL unless kv_dtype is FP8_E4M3 (per-token " +
                 "scales are for fp8 K/V; kv_dtype is " + dtype_name(raw_enum(args.kv_dtype)) +
                 ")");
  }
  const int64_t required = token_scale_slots_required(args);
  if (slots < required) {
    fail_field(slots_field,
               std::string("at least ") + std::to_string(required) +
                   (args.is_paged ? " (num_pages * 128)" : " (total_k)"),
               slots);
  }
  // Rows of a single-head cache are never stepped between, so their stride is free.
  if (args.num_kv_heads > 1 && stride_head < slots) {
    fail_field(stride_field, std::string("at least ") + slots_field + " (" +
                                 std::to_string(slots) + ")",
               stride_head);
  }
}

// Per-(KV head, token slot) fp8 descales (contract section 6, this project's extension).
void validate_token_scales(const flashmsa_args& args) {
  validate_token_scale(args, args.k_token_scale, args.k_token_scale_stride_head,
                       args.k_token_scale_slots, "k_token_scale", "k_token_scale_stride_head",
                       "k_token_scale_slots");
  validate_token_scale(args, args.v_token_scale, args.v_token_scale_stride_head,
                       args.v_token_scale_slots, "v_token_scale", "v_token_scale_stride_head",
                       "v_token_scale_slots");
}

// A global scale read from device memory replaces the float field, which must then be neutral:
// a caller that set both would otherwise get one of them silently ignored.
void require_unit_beside_device_scale(float value, const float* device_value, const char* field,
                                      const char* device_field) {
  if (device_value != nullptr && value != 1.0f) {
    fail_field(field, std::string("1 when ") + device_field + " is set (its value replaces it)",
               value);
  }
}

void validate_numerics(const flashmsa_args& args) {
  require_finite(args.softmax_scale, "softmax_scale");
  require_finite(args.k_global_scale, "k_global_scale");
  require_finite(args.v_global_scale, "v_global_scale");
  require_unit_beside_device_scale(args.k_global_scale, args.k_global_scale_device,
                                   "k_global_scale", "k_global_scale_device");
  require_unit_beside_device_scale(args.v_global_scale, args.v_global_scale_device,
                                   "v_global_scale", "v_global_scale_device");
  if (!std::isfinite(args.lse_temperature_scale) || !(args.lse_temperature_scale > 0.0f)) {
    fail_field("lse_temperature_scale", "a finite value > 0", args.lse_temperature_scale);
  }
}

void validate_masking(const flashmsa_args& args) {
  require_flag(args.causal, "causal");
  require_flag(args.causal_entry_limit, "causal_entry_limit");
  if (args.causal_entry_limit && !args.causal) {
    fail_invalid("causal_entry_limit: needs causal = 1 (the limit follows causal positions)");
  }
  const int mode = raw_enum(args.q_offset_mode);
  if (mode < FLASHMSA_Q_OFFSET_END_ALIGNED || mode > FLASHMSA_Q_OFFSET_PER_REQUEST) {
    fail_field("q_offset_mode", "END_ALIGNED (0), SCALAR (1) or PER_REQUEST (2)", mode);
  }
  if (mode == FLASHMSA_Q_OFFSET_PER_REQUEST) {
    if (args.batch_size > 0) {
      require_pointer(args.q_offset_per_request, "q_offset_per_request",
                      "when q_offset_mode is PER_REQUEST");
    }
  } else {
    require_null(args.q_offset_per_request, "q_offset_per_request",
                 "unless q_offset_mode is PER_REQUEST");
  }
}

void validate_outputs(const flashmsa_args& args) {
  if (args.total_q > 0) require_pointer(args.out, "out", "when total_q > 0");
  if (args.workspace_bytes > 0) {
    require_pointer(args.workspace, "workspace", "when workspace_bytes > 0");
  }
}

}  // namespace

int64_t nvfp4_scale_bytes_required(const flashmsa_args& args) {
  if (args.kv_dtype != FLASHMSA_DTYPE_NVFP4) return 0;
  int64_t rows = 0;
  // 2^56 rows is far beyond any real cache and keeps the byte count below int64's range.
  constexpr int64_t kMaxRows = int64_t{1} << 56;
  if (!kv_rows(args, &rows) || rows > kMaxRows) {
    fail_invalid("total_k/num_pages: K/V row count overflows the NVFP4 scale size");
  }
  return nvfp4_scale_bytes_needed(rows);
}

void validate_args(const flashmsa_args* args) {
  if (args == nullptr) fail_invalid("args: must not be NULL");
  validate_device(*args);
  validate_dtypes(*args);
  validate_sizes(*args);
  validate_layout(*args);
  validate_input_pointers(*args);
  validate_block_scales(*args);
  validate_token_scales(*args);
  validate_numerics(*args);
  validate_masking(*args);
  validate_outputs(*args);
}

}  // namespace flashmsa
