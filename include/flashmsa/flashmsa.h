/* FlashMSA: MiniMax Sparse Attention (MSA) forward, C ABI.
 *
 * The semantics are those of ../shared/spec/msa_sparse_attention.md (the contract), restated on
 * the fields below. One call computes, for every query row and query head, exact softmax
 * attention over the keys of the 128-token blocks that its KV head's index list selects.
 *
 * Usage: fill a flashmsa_args with flashmsa_args_init(), set the fields, call
 * flashmsa_sparse_attention(). Every function returns a status; on failure
 * flashmsa_last_error() gives a message naming the offending argument. Nothing ever exits the
 * process. The library validates everything it can see on the host before any work starts;
 * values that live in device memory (indices, sequence lengths, page ids) are never trusted:
 * any value is handled without out-of-bounds access (contract section 4).
 *
 * Units: every stride is in elements of the tensor's storage type (bytes for fp8 and packed
 * NVFP4, whose storage type is one byte). Pointers point at element [0, 0, ...] of the view.
 */
#ifndef FLASHMSA_FLASHMSA_H_
#define FLASHMSA_FLASHMSA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHMSA_ABI_VERSION 3
#define FLASHMSA_BLOCK_SIZE 128 /* tokens per selectable key block (= page size) */

typedef enum flashmsa_status {
  FLASHMSA_OK = 0,
  FLASHMSA_ERROR_INVALID_ARGUMENT = 1, /* wrong shape, dtype, stride, contradicting arguments */
  FLASHMSA_ERROR_NOT_SUPPORTED = 2,    /* valid, but not supported by this build or device */
  FLASHMSA_ERROR_CUDA = 3,             /* a CUDA call failed; the text carries CUDA's message */
  FLASHMSA_ERROR_INTERNAL = 4
} flashmsa_status;

typedef enum flashmsa_dtype {
  FLASHMSA_DTYPE_BF16 = 0,
  FLASHMSA_DTYPE_FP16 = 1,
  FLASHMSA_DTYPE_FP8_E4M3 = 2, /* K/V only */
  FLASHMSA_DTYPE_NVFP4 = 3     /* K/V only: uint8, two E2M1 values per byte, low nibble first */
} flashmsa_dtype;

typedef enum flashmsa_device {
  FLASHMSA_DEVICE_CPU = 0,
  FLASHMSA_DEVICE_CUDA = 1
} flashmsa_device;

typedef enum flashmsa_q_offset_mode {
  FLASHMSA_Q_OFFSET_END_ALIGNED = 0, /* q_offset[b] = seqlen_k[b] - seqlen_q[b] (the default) */
  FLASHMSA_Q_OFFSET_SCALAR = 1,      /* q_offset[b] = q_offset_value for every request */
  FLASHMSA_Q_OFFSET_PER_REQUEST = 2  /* q_offset[b] = q_offset_per_request[b] */
} flashmsa_q_offset_mode;

/* Where NVFP4 block scales sit (contract section 6). */
typedef enum flashmsa_nvfp4_scale_layout {
  /* One table per tensor in the swizzled 128x4 layout, k_scale_bytes / v_scale_bytes long. */
  FLASHMSA_NVFP4_SCALES_SWIZZLED = 0,
  /* Paged K/V only: one plane of 128 * (D / 16) bytes per (page, KV head), wherever the page and
   * head strides put it (the NVFP4 page of vLLM: [K data | K scales | V data | V scales]). */
  FLASHMSA_NVFP4_SCALES_PAGE_LOCAL = 1
} flashmsa_nvfp4_scale_layout;

typedef struct flashmsa_args {
  /* Where the tensors live. CUDA runs need compute capability 9.0. */
  flashmsa_device device;
  int32_t device_index;
  void* stream; /* cudaStream_t for CUDA runs; NULL = legacy default stream. Ignored on CPU. */

  /* Sizes. head_dim must be 128. num_qo_heads % num_kv_heads == 0. 1 <= topk <= 64. */
  int64_t batch_size;   /* B */
  int64_t total_q;      /* query rows of all requests */
  int64_t num_qo_heads; /* Hq */
  int64_t num_kv_heads; /* Hkv */
  int64_t head_dim;     /* D */
  int64_t topk;
  int32_t is_paged;     /* 0: flat K/V, 1: paged K/V */
  int64_t total_k;      /* flat: rows of k and v; paged: unused */
  int64_t num_pages;    /* paged: first dim of k and v; flat: unused */
  int64_t max_pages_per_request; /* paged: page_table.shape[1]; flat: unused */

  flashmsa_dtype q_dtype;  /* BF16 or FP16; out has the same dtype */
  flashmsa_dtype kv_dtype; /* q_dtype, FP8_E4M3 or NVFP4 */

  /* q: (total_q, Hq, D), last dim contiguous. */
  const void* q;
  int64_t q_stride_token, q_stride_head;

  /* k, v flat: (total_k, Hkv, Dstore); paged: (num_pages, Hkv, 128, Dstore), last dim
   * contiguous; Dstore = D, or D / 2 for NVFP4. stride_page is unused on the flat path. */
  const void* k;
  int64_t k_stride_page, k_stride_head, k_stride_token;
  const void* v;
  int64_t v_stride_page, v_stride_head, v_stride_token;

  /* NVFP4 only: E4M3 block-scale bytes, NULL otherwise. In the swizzled layout (the default,
   * see nvfp4_scale_layout) at least ceil(rows / 128) * 128 * (D / 16) bytes each; in the
   * page-local layout they point at the plane of (page 0, head 0) and the *_bytes are unused. */
  const uint8_t* k_scale;
  int64_t k_scale_bytes;
  const uint8_t* v_scale;
  int64_t v_scale_bytes;

  /* q2k_indices: (Hkv, total_q, topk) int32, any strides. Block ids, request-local. */
  const int32_t* q2k_indices;
  int64_t idx_stride_head, idx_stride_token, idx_stride_topk;

  const int32_t* cu_seqlens_q; /* (B + 1) prefix sums of query lengths */
  const int32_t* cu_seqlens_k; /* flat: (B + 1) prefix sums of key lengths; paged: NULL */
  const int32_t* seqused_k;    /* paged: (B) key length of each request; flat: NULL */
  const int32_t* page_table;   /* paged: (B, max_pages_per_request); flat: NULL */
  int64_t page_table_stride_batch, page_table_stride_page;

  /* Causal masking: key c is visible to query i of request b iff c <= q_offset[b] + i. */
  int32_t causal;
  flashmsa_q_offset_mode q_offset_mode;
  int64_t q_offset_value;              /* FLASHMSA_Q_OFFSET_SCALAR */
  const int32_t* q_offset_per_request; /* FLASHMSA_Q_OFFSET_PER_REQUEST: (B) */

  /* Numerics: s = softmax_scale * k_global_scale * q.k; out = v_global_scale * softmax(s) V.
   * The global scales may instead live in device memory: see k_global_scale_device. */
  float softmax_scale;         /* finite; flashmsa_args_init sets D^-0.5 for D = 128 */
  float k_global_scale;        /* 1 when not given, or when k_global_scale_device is set */
  float v_global_scale;        /* 1 when not given, or when v_global_scale_device is set */
  float lse_temperature_scale; /* T > 0, finite; lse_t = log sum exp(T * s) */

  /* Outputs. out: (total_q, Hq, D) in q_dtype, last dim contiguous. lse, lse_t: (total_q, Hq)
   * float32, NULL when not wanted. A row that reads no key gets out = 0 and lse = -inf. */
  void* out;
  int64_t out_stride_token, out_stride_head;
  float* lse;
  int64_t lse_stride_token, lse_stride_head;
  float* lse_t;
  int64_t lse_t_stride_token, lse_t_stride_head;

  /* Scratch memory on the run's device (see flashmsa_workspace_bytes). NULL with 0 bytes is
   * allowed only when flashmsa_workspace_bytes reports 0. */
  void* workspace;
  size_t workspace_bytes;

  /* Global scales in device memory (contract section 6), NULL when not used. When non-NULL, the
   * backend multiplies by the float the pointer points at (memory of the run's device) in place
   * of k_global_scale / v_global_scale, whose fields must then be 1. The float is read by the
   * work itself (on CUDA by the kernels, never by the host), so a captured CUDA graph replays
   * with the value it holds at replay time; its value is not checked. */
  const float* k_global_scale_device;
  const float* v_global_scale_device;

  /* NVFP4 only: where k_scale / v_scale sit. In the page-local layout (paged K/V only), the
   * scale of (page p, KV head h, token t in page, group s of 16 elements) is, with C = D / 16:
   *   K: k_scale[p * k_scale_stride_page + h * k_scale_stride_head + t * C + s] (linear);
   *   V: v_scale[p * v_scale_stride_page + h * v_scale_stride_head
   *              + (t / 4) * 4 * C + s * 4 + t % 4] (token-quad order).
   * The plane strides are in bytes, multiples of 16 (where that dimension has more than one
   * entry); k and v must then have token stride D / 2 and page and head strides that are
   * multiples of 16 bytes. The strides are unused in the swizzled layout. */
  flashmsa_nvfp4_scale_layout nvfp4_scale_layout;
  int64_t k_scale_stride_page, k_scale_stride_head;
  int64_t v_scale_stride_page, v_scale_stride_head;

  /* FP8_E4M3 only: per-(KV head, token slot) float32 descales in memory of the run's device,
   * NULL when not used (docs/contract.md section 6, this project's extension). Tensor
   * (Hkv, slots), last dim contiguous, row h at k_token_scale + h * k_token_scale_stride_head
   * (stride >= slots). The slot of paged (page p, token t) is p * 128 + t (slots >=
   * num_pages * 128); of flat key row r it is r (slots >= total_k). A key is
   * e4m3 * k_token_scale[h, slot] * k_global_scale; a value likewise with the v_ fields. Either
   * may be NULL alone (its scale is then 1). */
  const float* k_token_scale;
  int64_t k_token_scale_stride_head;
  int64_t k_token_scale_slots;
  const float* v_token_scale;
  int64_t v_token_scale_stride_head;
  int64_t v_token_scale_slots;

  /* 1: the causal entry limit (this project's extension; the rule of vLLM's MiniMax-M3
   * kernels): a query at causal position p reads only the entries c of its index row with
   * c * 128 <= p, the first min(topk, p / 128 + 1), and none when p < 0; rule 1 (the first
   * negative entry) still ends a row earlier. Requires causal = 1. 0 (default): every entry. */
  int32_t causal_entry_limit;
} flashmsa_args;

/* Fills every field with its neutral default (NULL pointers, zero sizes, unit scales on the
 * host, softmax_scale = 128^-0.5, end-aligned q_offset, swizzled NVFP4 scales, CPU device). */
void flashmsa_args_init(flashmsa_args* args);

/* Validates args and returns in *bytes the scratch memory a call with these shapes and options
 * needs. Depends on shapes and options only, never on device data, so it can be sized once
 * before a CUDA graph is captured. */
flashmsa_status flashmsa_workspace_bytes(const flashmsa_args* args, size_t* bytes);

/* Validates args, then computes the forward. CUDA runs are asynchronous on args->stream and
 * never synchronise with the host, so they can be captured in a CUDA graph. */
flashmsa_status flashmsa_sparse_attention(const flashmsa_args* args);

/* Scratch memory for a call, asked for once its launch is planned and only when
 * args->workspace_bytes is less than the call needs: a device pointer to at least `bytes`
 * bytes, usable in stream order on args->stream, or NULL to fail the call. */
typedef void* (*flashmsa_workspace_fn)(size_t bytes, void* context);

/* flashmsa_sparse_attention, with scratch memory from workspace_fn(bytes, context) where
 * args->workspace is too small: one validation and one launch plan per call, for callers that
 * allocate on demand (the Python package). */
flashmsa_status flashmsa_sparse_attention_with_workspace_fn(const flashmsa_args* args,
                                                            flashmsa_workspace_fn workspace_fn,
                                                            void* context);

/* Text of the last failure on the calling thread ("" when none). Valid until the next call. */
const char* flashmsa_last_error(void);

/* Whether this build has the Hopper kernels compiled in (1) or is CPU-only (0). */
int flashmsa_has_cuda(void);

/* FLASHMSA_ABI_VERSION of the library actually loaded. */
int flashmsa_abi_version(void);

/* Merging attention states (context parallelism: each device attends to its share of the keys,
 * the results are merged). State i of a (row, head) is (out_i, lse_i) over a key set K_i, the
 * K_i disjoint; the merge is the state over their union:
 *   m = max_i lse_i;  w_i = exp(lse_i - m) (0 where lse_i = -inf);  lse = m + log(sum_i w_i);
 *   out = sum_i (w_i / sum_i w_i) * out_i, accumulated in fp32 and rounded once to dtype.
 * A (row, head) whose every lse_i is -inf read nothing: out = 0 exactly, lse = -inf. A state
 * whose weight is 0 contributes nothing, whatever its out_i holds. lse_i = +inf or NaN is not a
 * valid input (no finite state has it; the result is then undefined). */

/* Element types of the partial and merged outputs: flashmsa_dtype's BF16 and FP16 values, and
 * fp32, in which callers often keep partials that they merge. */
typedef enum flashmsa_merge_dtype {
  FLASHMSA_MERGE_DTYPE_BF16 = 0, /* = FLASHMSA_DTYPE_BF16 */
  FLASHMSA_MERGE_DTYPE_FP16 = 1, /* = FLASHMSA_DTYPE_FP16 */
  FLASHMSA_MERGE_DTYPE_FP32 = 4
} flashmsa_merge_dtype;

typedef struct flashmsa_merge_args {
  /* Where the tensors live. CUDA is not implemented by this entry yet (the Python function
   * merges CUDA tensors with torch operations): it returns FLASHMSA_ERROR_NOT_SUPPORTED. */
  flashmsa_device device;
  int32_t device_index;
  void* stream; /* cudaStream_t for CUDA runs; NULL = legacy default stream. Ignored on CPU. */

  /* Sizes: num_states >= 1, the others >= 0. */
  int64_t num_states; /* N */
  int64_t total_q;
  int64_t num_heads;
  int64_t head_dim;
  flashmsa_merge_dtype dtype; /* of every partial out and of out */

  /* Arrays of num_states entries, entry i describing state i. Partial out i:
   * (total_q, num_heads, head_dim) in dtype, last dim contiguous, at partial_outs[i] with
   * strides partial_out_stride_token[i], partial_out_stride_head[i]. Partial lse i:
   * (total_q, num_heads) float32 at partial_lses[i] with strides partial_lse_stride_token[i],
   * partial_lse_stride_head[i]. */
  const void* const* partial_outs;
  const int64_t* partial_out_stride_token;
  const int64_t* partial_out_stride_head;
  const float* const* partial_lses;
  const int64_t* partial_lse_stride_token;
  const int64_t* partial_lse_stride_head;

  /* Outputs. out: (total_q, num_heads, head_dim) in dtype, last dim contiguous. lse:
   * (total_q, num_heads) float32, NULL when not wanted. Either may be one of the partials
   * itself (the same pointer and strides: a merge in place); any other overlap with an input
   * is undefined. */
  void* out;
  int64_t out_stride_token, out_stride_head;
  float* lse;
  int64_t lse_stride_token, lse_stride_head;
} flashmsa_merge_args;

/* Fills every field with its neutral default (NULL pointers, zero sizes and strides, BF16, CPU
 * device). */
void flashmsa_merge_args_init(flashmsa_merge_args* args);

/* Validates args, then merges the states into out and lse. CPU only for now (see device). */
flashmsa_status flashmsa_merge_attention_states(const flashmsa_merge_args* args);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHMSA_FLASHMSA_H_ */
