// A small attention problem for the C++ tests: random logical Q/K/V/indices, their storage in
// every dtype and in both the flat and the paged layout, flashmsa_args pointing at them, and a
// naive double-precision evaluation of the contract written independently of the library (it
// shares only the bit-level decoders, which tests of their own pin to tables).
#pragma once

#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/float16.h"
#include "common/fp8.h"
#include "common/nvfp4.h"
#include "flashmsa/flashmsa.h"

namespace flashmsa_test {

constexpr int kHeadDim = 128;
constexpr int kBlock = 128;

struct CaseOptions {
  std::vector<int> q_lens;
  std::vector<int> k_lens;
  int num_qo_heads = 4;
  int num_kv_heads = 2;
  int topk = 6;
  flashmsa_dtype q_dtype = FLASHMSA_DTYPE_BF16;
  flashmsa_dtype kv_dtype = FLASHMSA_DTYPE_BF16;
  bool causal = true;
  flashmsa_q_offset_mode q_offset_mode = FLASHMSA_Q_OFFSET_END_ALIGNED;
  int64_t q_offset_value = 0;
  std::vector<int32_t> q_offset_per_request;
  float softmax_scale = 0.08838834764831845f;  // 128^-0.5
  float k_global_scale = 1.0f;
  float v_global_scale = 1.0f;
  float lse_temperature_scale = 1.0f;
  int extra_q_rows = 0;         // rows of q past cu_seqlens_q[B]: in no request
  int extra_pages = 3;          // unused pages of the paged cache (filled with NaN where possible)
  int extra_table_columns = 1;  // page-table entries past every request's blocks (-1)
  // fp8 only: per-(KV head, token slot) scales for K and V (contract section 6 extension).
  bool token_scales = false;
  uint64_t seed = 1;
};

struct Result {
  flashmsa_status status = FLASHMSA_OK;
  std::string error;
  std::vector<uint16_t> out_bits;  // (total_q, Hq, D) in q's dtype
  std::vector<float> out;          // the same, widened
  std::vector<float> lse;          // (total_q, Hq)
  std::vector<float> lse_t;
};

struct Expected {
  std::vector<double> out;  // (total_q, Hq, D)
  std::vector<double> lse;  // (total_q, Hq); -inf for rows that read nothing
  std::vector<double> lse_t;
};

class TestCase {
 public:
  explicit TestCase(const CaseOptions& options) : o_(options), rng_(options.seed) {
    batch_ = static_cast<int>(o_.q_lens.size());
    cu_q_.push_back(0);
    cu_k_.push_back(0);
    for (int b = 0; b < batch_; ++b) {
      cu_q_.push_back(cu_q_.back() + o_.q_lens[b]);
      cu_k_.push_back(cu_k_.back() + o_.k_lens[b]);
    }
    total_q_ = cu_q_.back() + o_.extra_q_rows;
    total_k_ = cu_k_.back();
    make_queries();
    make_keys_and_values();
    make_indices();
    make_paged_layout();
    if (o_.token_scales) make_token_scales();
  }

  int total_q() const { return total_q_; }
  int batch() const { return batch_; }
  int num_blocks(int b) const { return (o_.k_lens[b] + kBlock - 1) / kBlock; }
  // Causal position of query i of request b.
  int64_t position(int b, int i) const {
    if (o_.q_offset_mode == FLASHMSA_Q_OFFSET_SCALAR) return o_.q_offset_value + i;
    if (o_.q_offset_mode == FLASHMSA_Q_OFFSET_PER_REQUEST) return o_.q_offset_per_request[b] + i;
    return int64_t{o_.k_lens[b]} - o_.q_lens[b] + i;
  }
  // Logical (Hkv, total_q, topk) indices: tests may edit them before calling args().
  int32_t& index(int kv_head, int row, int slot) {
    return indices_[(static_cast<size_t>(row) * o_.num_kv_heads + kv_head) * o_.topk + slot];
  }
  // Page-table entry of block j of request b: tests may corrupt it.
  int32_t& page_table_entry(int b, int j) { return page_table_[b * table_columns_ + j]; }
  // The device-side integer arrays, for tests that fill them with garbage.
  std::vector<int32_t>& cu_seqlens_q() { return cu_q_; }
  std::vector<int32_t>& cu_seqlens_k() { return cu_k_; }
  std::vector<int32_t>& seqused_k() { return seqused_; }
  std::vector<int32_t>& page_table() { return page_table_; }
  std::vector<int32_t>& indices() { return indices_; }
  std::vector<int32_t>& q_offset_per_request() { return o_.q_offset_per_request; }

  // Arguments over this case's buffers. Indices are stored token-major (a transposed view) and
  // q as a slice of a wider buffer, to exercise the strides.
  flashmsa_args args(bool paged) {
    flashmsa_args a;
    flashmsa_args_init(&a);
    const int hq = o_.num_qo_heads, hkv = o_.num_kv_heads;
    a.batch_size = batch_;
    a.total_q = total_q_;
    a.num_qo_heads = hq;
    a.num_kv_heads = hkv;
    a.head_dim = kHeadDim;
    a.topk = o_.topk;
    a.q_dtype = o_.q_dtype;
    a.kv_dtype = o_.kv_dtype;
    a.q = q_bits_.data();
    a.q_stride_token = q_token_stride_;
    a.q_stride_head = kHeadDim;
    a.q2k_indices = indices_.data();
    a.idx_stride_token = int64_t{hkv} * o_.topk;
    a.idx_stride_head = o_.topk;
    a.idx_stride_topk = 1;
    a.cu_seqlens_q = cu_q_.data();
    const int64_t row_bytes = stored_row_bytes();
    if (paged) {
      a.is_paged = 1;
      a.num_pages = num_pages_;
      a.max_pages_per_request = table_columns_;
      a.k = paged_k_.data();
      a.v = paged_v_.data();
      a.k_stride_token = a.v_stride_token = row_bytes / element_bytes();
      a.k_stride_head = a.v_stride_head = row_bytes / element_bytes() * kBlock;
      a.k_stride_page = a.v_stride_page = row_bytes / element_bytes() * kBlock * hkv;
      a.seqused_k = seqused_.data();
      a.page_table = page_table_.data();
      a.page_table_stride_batch = table_columns_;
      a.page_table_stride_page = 1;
    } else {
      // K and V side by side in one buffer per (token, head), as vLLM packs them.
      a.total_k = total_k_;
      a.k = flat_kv_.data();
      a.v = flat_kv_.data() + row_bytes;
      a.k_stride_head = a.v_stride_head = 2 * row_bytes / element_bytes();
      a.k_stride_token = a.v_stride_token = 2 * row_bytes / element_bytes() * hkv;
      a.cu_seqlens_k = cu_k_.data();
    }
    if (o_.kv_dtype == FLASHMSA_DTYPE_NVFP4) {
      std::vector<uint8_t>& k_scale = paged ? paged_k_scale_ : flat_k_scale_;
      std::vector<uint8_t>& v_scale = paged ? paged_v_scale_ : flat_v_scale_;
      a.k_scale = k_scale.data();
      a.k_scale_bytes = static_cast<int64_t>(k_scale.size());
      a.v_scale = v_scale.data();
      a.v_scale_bytes = static_cast<int64_t>(v_scale.size());
    }
    if (o_.token_scales) {
      const std::vector<float>& k_scale = paged ? paged_k_token_scale_ : flat_k_token_scale_;
      const std::vector<float>& v_scale = paged ? paged_v_token_scale_ : flat_v_token_scale_;
      const int64_t slots = paged ? int64_t{num_pages_} * kBlock : total_k_;
      a.k_token_scale = k_scale.data();
      a.v_token_scale = v_scale.data();
      a.k_token_scale_slots = a.v_token_scale_slots = slots;
      a.k_token_scale_stride_head = a.v_token_scale_stride_head = slots + kTokenScalePadding;
    }
    a.causal = o_.causal ? 1 : 0;
    a.q_offset_mode = o_.q_offset_mode;
    a.q_offset_value = o_.q_offset_value;
    if (o_.q_offset_mode == FLASHMSA_Q_OFFSET_PER_REQUEST) {
      a.q_offset_per_request = o_.q_offset_per_request.data();
    }
    a.softmax_scale = o_.softmax_scale;
    a.k_global_scale = o_.k_global_scale;
    a.v_global_scale = o_.v_global_scale;
    a.lse_temperature_scale = o_.lse_temperature_scale;
    // out contiguous; lse stored head-major and lse_t token-major, to exercise their strides.
    out_.assign(static_cast<size_t>(total_q_) * hq * kHeadDim, 0xBEEF);
    lse_.assign(static_cast<size_t>(total_q_) * hq, 12345.0f);
    lse_t_.assign(static_cast<size_t>(total_q_) * hq, 12345.0f);
    a.out = out_.data();
    a.out_stride_token = int64_t{hq} * kHeadDim;
    a.out_stride_head = kHeadDim;
    a.lse = lse_.data();
    a.lse_stride_token = 1;
    a.lse_stride_head = total_q_;
    a.lse_t = lse_t_.data();
    a.lse_t_stride_token = hq;
    a.lse_t_stride_head = 1;
    return a;
  }

  // Points the paged NVFP4 arguments `a` (from args(true)) at the same block scales in the
  // page-local form of contract section 6: one plane of 128 x 8 bytes per (page, KV head), K
  // linear, V in token-quad order, the planes padded apart (with NaN bytes) so that their
  // strides matter.
  void use_page_local_scales(flashmsa_args& a) {
    const int hkv = o_.num_kv_heads;
    const int64_t plane_bytes = int64_t{kBlock} * 8;
    const int64_t head_stride = plane_bytes + 16, page_stride = hkv * head_stride + 32;
    page_local_k_scale_.assign(static_cast<size_t>(num_pages_ * page_stride), 0x7F);
    page_local_v_scale_ = page_local_k_scale_;
    for (int page = 0; page < num_pages_; ++page) {
      for (int h = 0; h < hkv; ++h) {
        const int64_t plane = page * page_stride + h * head_stride;
        for (int t = 0; t < kBlock; ++t) {
          const int64_t row = (int64_t{page} * hkv + h) * kBlock + t;
          for (int c = 0; c < 8; ++c) {
            const int64_t swizzled = flashmsa::nvfp4_scale_offset(row, c);
            page_local_k_scale_[plane + t * 8 + c] = paged_k_scale_[swizzled];
            page_local_v_scale_[plane + (t / 4) * 4 * 8 + c * 4 + t % 4] =
                paged_v_scale_[swizzled];
          }
        }
      }
    }
    a.nvfp4_scale_layout = FLASHMSA_NVFP4_SCALES_PAGE_LOCAL;
    a.k_scale = page_local_k_scale_.data();
    a.v_scale = page_local_v_scale_.data();
    a.k_scale_bytes = a.v_scale_bytes = 0;  // unused in the page-local form
    a.k_scale_stride_page = a.v_scale_stride_page = page_stride;
    a.k_scale_stride_head = a.v_scale_stride_head = head_stride;
  }

  // Runs the library through the C ABI and gathers the outputs in (row, head) order.
  Result run(bool paged) { return run(args(paged)); }

  // The same, for arguments from args() that a test has edited.
  Result run(const flashmsa_args& a) {
    Result result;
    result.status = flashmsa_sparse_attention(&a);
    result.error = flashmsa_last_error();
    const int hq = o_.num_qo_heads;
    result.out_bits = out_;
    for (uint16_t bits : out_) result.out.push_back(widen_q(bits));
    for (int row = 0; row < total_q_; ++row) {
      for (int head = 0; head < hq; ++head) {
        result.lse.push_back(lse_[static_cast<size_t>(head) * total_q_ + row]);
        result.lse_t.push_back(lse_t_[static_cast<size_t>(row) * hq + head]);
      }
    }
    return result;
  }

  // The contract evaluated in double on the logical values. `paged` matters only through the
  // rules that exist on the paged path alone (page-table width, invalid page ids).
  Expected expected(bool paged) const {
    const int hq = o_.num_qo_heads, hkv = o_.num_kv_heads, group = hq / hkv;
    Expected e;
    e.out.assign(static_cast<size_t>(total_q_) * hq * kHeadDim, 0.0);
    e.lse.assign(static_cast<size_t>(total_q_) * hq, -std::numeric_limits<double>::infinity());
    e.lse_t = e.lse;
    for (int b = 0; b < batch_; ++b) {
      for (int i = 0; i < o_.q_lens[b]; ++i) {
        const int row = cu_q_[b] + i;
        for (int h = 0; h < hkv; ++h) {
          std::vector<int> keys = visible_keys(b, i, h, paged);
          if (keys.empty()) continue;
          for (int g = 0; g < group; ++g) {
            evaluate_row(b, row, h * group + g, h, keys, e);
          }
        }
      }
    }
    return e;
  }

 private:
  int element_bytes() const {
    return o_.kv_dtype == FLASHMSA_DTYPE_BF16 || o_.kv_dtype == FLASHMSA_DTYPE_FP16 ? 2 : 1;
  }
  int64_t stored_row_bytes() const {
    return o_.kv_dtype == FLASHMSA_DTYPE_NVFP4 ? kHeadDim / 2 : int64_t{kHeadDim} * element_bytes();
  }
  float widen_q(uint16_t bits) const {
    return o_.q_dtype == FLASHMSA_DTYPE_BF16 ? flashmsa::bf16_to_float(bits)
                                             : flashmsa::fp16_to_float(bits);
  }
  uint16_t narrow_q(float value) const {
    return o_.q_dtype == FLASHMSA_DTYPE_BF16 ? flashmsa::float_to_bf16(value)
                                             : flashmsa::float_to_fp16(value);
  }
  double normal() { return std::normal_distribution<double>(0.0, 1.0)(rng_) / 3.0; }
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  void make_queries() {
    const int hq = o_.num_qo_heads;
    q_token_stride_ = int64_t{hq} * kHeadDim + 64;  // a slice of a wider (fused QKV) buffer
    q_bits_.assign(static_cast<size_t>(total_q_) * q_token_stride_, 0x7FC0);  // NaN padding
    q_.assign(static_cast<size_t>(total_q_) * hq * kHeadDim, 0.0);
    for (int row = 0; row < total_q_; ++row) {
      for (int i = 0; i < hq * kHeadDim; ++i) {
        const uint16_t bits = narrow_q(static_cast<float>(normal()));
        q_bits_[row * q_token_stride_ + i] = bits;
        q_[static_cast<size_t>(row) * hq * kHeadDim + i] = widen_q(bits);
      }
    }
  }

  // One stored K/V row in kv_dtype and its exact logical values. NVFP4 also yields the row's
  // eight scale bytes.
  void make_row(uint8_t* stored, uint8_t* scales, double* logical) {
    switch (o_.kv_dtype) {
      case FLASHMSA_DTYPE_BF16:
      case FLASHMSA_DTYPE_FP16:
        for (int d = 0; d < kHeadDim; ++d) {
          const float value = static_cast<float>(normal());
          const uint16_t bits = o_.kv_dtype == FLASHMSA_DTYPE_BF16 ? flashmsa::float_to_bf16(value)
                                                                   : flashmsa::float_to_fp16(value);
          memcpy(stored + 2 * d, &bits, 2);
          logical[d] = o_.kv_dtype == FLASHMSA_DTYPE_BF16 ? flashmsa::bf16_to_float(bits)
                                                          : flashmsa::fp16_to_float(bits);
        }
        return;
      case FLASHMSA_DTYPE_FP8_E4M3:
        for (int d = 0; d < kHeadDim; ++d) {
          // Exponent field 0..8: magnitudes up to 3.75, subnormals included, never NaN.
          const uint8_t byte =
              static_cast<uint8_t>((uniform(0, 1) << 7) | (uniform(0, 8) << 3) | uniform(0, 7));
          stored[d] = byte;
          logical[d] = flashmsa::e4m3_to_float(byte);
        }
        return;
      case FLASHMSA_DTYPE_NVFP4:
        for (int group = 0; group < 8; ++group) {
          scales[group] = static_cast<uint8_t>(uniform(0x28, 0x3F));  // 0.25 .. 1.875
        }
        for (int d = 0; d < kHeadDim; d += 2) {
          const int low = uniform(0, 15), high = uniform(0, 15);
          stored[d / 2] = static_cast<uint8_t>(low | (high << 4));
          const double scale = flashmsa::e4m3_to_float(scales[d / 16]);
          logical[d] = flashmsa::e2m1_to_float(low) * scale;
          logical[d + 1] = flashmsa::e2m1_to_float(high) * scale;
        }
        return;
    }
  }

  void make_keys_and_values() {
    const int hkv = o_.num_kv_heads;
    const int64_t row_bytes = stored_row_bytes();
    const size_t rows = static_cast<size_t>(total_k_) * hkv;
    flat_kv_.assign(rows * 2 * row_bytes, 0);
    k_stored_.assign(rows * row_bytes, 0);
    v_stored_.assign(rows * row_bytes, 0);
    k_scales_.assign(rows * 8, 0);
    v_scales_.assign(rows * 8, 0);
    k_.assign(rows * kHeadDim, 0.0);
    v_.assign(rows * kHeadDim, 0.0);
    flat_k_scale_.assign(flashmsa::nvfp4_scale_bytes_needed(static_cast<int64_t>(rows)), 0);
    flat_v_scale_ = flat_k_scale_;
    for (size_t r = 0; r < rows; ++r) {  // r = token * Hkv + head
      make_row(&k_stored_[r * row_bytes], &k_scales_[r * 8], &k_[r * kHeadDim]);
      make_row(&v_stored_[r * row_bytes], &v_scales_[r * 8], &v_[r * kHeadDim]);
      memcpy(&flat_kv_[r * 2 * row_bytes], &k_stored_[r * row_bytes], row_bytes);
      memcpy(&flat_kv_[r * 2 * row_bytes + row_bytes], &v_stored_[r * row_bytes], row_bytes);
      for (int c = 0; c < 8; ++c) {
        flat_k_scale_[flashmsa::nvfp4_scale_offset(static_cast<int64_t>(r), c)] =
            k_scales_[r * 8 + c];
        flat_v_scale_[flashmsa::nvfp4_scale_offset(static_cast<int64_t>(r), c)] =
            v_scales_[r * 8 + c];
      }
    }
  }

  // Random ids with everything section 4 allows: out-of-range ids, duplicates, any order, a
  // negative that ends the list, and usually the query's own block.
  void make_indices() {
    const int hkv = o_.num_kv_heads;
    indices_.assign(static_cast<size_t>(total_q_) * hkv * o_.topk, -1);
    for (int b = 0; b < batch_; ++b) {
      const int blocks = num_blocks(b);
      for (int i = 0; i < o_.q_lens[b]; ++i) {
        for (int h = 0; h < hkv; ++h) {
          for (int slot = 0; slot < o_.topk; ++slot) {
            const int kind = uniform(0, 99);
            int32_t id;
            if (kind < 60 || slot == 0) {
              id = blocks > 0 ? uniform(0, blocks - 1) : 0;
            } else if (kind < 70) {
              id = blocks + uniform(0, 4);  // past the request's blocks
            } else if (kind < 80) {
              id = index(h, cu_q_[b] + i, slot - 1);  // a duplicate
            } else if (kind < 95) {
              const int64_t own = position(b, i) / kBlock;
              id = static_cast<int32_t>(own < 0 ? 0 : own);
            } else {
              id = -1 - uniform(0, 3);  // ends the list
            }
            index(h, cu_q_[b] + i, slot) = id;
          }
        }
      }
    }
  }

  // Pages are a shuffled permutation with spare pages; page tails past seqlen_k hold NaN (bf16,
  // fp16, fp8) so that reading them would show in the output.
  void make_paged_layout() {
    const int hkv = o_.num_kv_heads;
    const int64_t row_bytes = stored_row_bytes();
    int max_blocks = 0, used_pages = 0;
    for (int b = 0; b < batch_; ++b) {
      max_blocks = std::max(max_blocks, num_blocks(b));
      used_pages += num_blocks(b);
      seqused_.push_back(o_.k_lens[b]);
    }
    table_columns_ = max_blocks + o_.extra_table_columns;
    num_pages_ = used_pages + o_.extra_pages;
    std::vector<int32_t> pages(num_pages_);
    for (int p = 0; p < num_pages_; ++p) pages[p] = p;
    std::shuffle(pages.begin(), pages.end(), rng_);
    page_table_.assign(static_cast<size_t>(batch_) * std::max(table_columns_, 1), -1);
    const size_t page_bytes = static_cast<size_t>(hkv) * kBlock * row_bytes;
    uint8_t filler = 0;
    if (o_.kv_dtype == FLASHMSA_DTYPE_FP8_E4M3) filler = 0x7F;  // NaN
    if (o_.kv_dtype == FLASHMSA_DTYPE_BF16) filler = 0xFF;      // 0xFFFF: NaN
    if (o_.kv_dtype == FLASHMSA_DTYPE_FP16) filler = 0xFF;      // 0xFFFF: NaN
    paged_k_.assign(num_pages_ * page_bytes, filler);
    paged_v_.assign(num_pages_ * page_bytes, filler);
    const int64_t paged_rows = int64_t{num_pages_} * hkv * kBlock;
    paged_k_scale_.assign(flashmsa::nvfp4_scale_bytes_needed(paged_rows), 0x7F);
    paged_v_scale_ = paged_k_scale_;
    int next = 0;
    for (int b = 0; b < batch_; ++b) {
      for (int j = 0; j < num_blocks(b); ++j) {
        const int page = pages[next++];
        page_table_entry(b, j) = page;
        for (int t = 0; t < kBlock && j * kBlock + t < o_.k_lens[b]; ++t) {
          const int64_t token = cu_k_[b] + j * kBlock + t;
          for (int h = 0; h < hkv; ++h) {
            const size_t flat_row = static_cast<size_t>(token) * hkv + h;
            const int64_t paged_row = (int64_t{page} * hkv + h) * kBlock + t;
            memcpy(&paged_k_[paged_row * row_bytes], &k_stored_[flat_row * row_bytes], row_bytes);
            memcpy(&paged_v_[paged_row * row_bytes], &v_stored_[flat_row * row_bytes], row_bytes);
            for (int c = 0; c < 8; ++c) {
              paged_k_scale_[flashmsa::nvfp4_scale_offset(paged_row, c)] =
                  k_scales_[flat_row * 8 + c];
              paged_v_scale_[flashmsa::nvfp4_scale_offset(paged_row, c)] =
                  v_scales_[flat_row * 8 + c];
            }
          }
        }
      }
    }
  }

  // Per-token scales in [0.25, 2) for every (KV head, key), stored in the flat layout (slot =
  // key row) and the paged one (slot = page * 128 + token, NaN in slots no key uses), rows
  // padded apart so that the stride matters. The logical K/V take them on, so that expected()
  // evaluates key = e4m3 * scale.
  void make_token_scales() {
    const int hkv = o_.num_kv_heads;
    const int64_t flat_stride = total_k_ + kTokenScalePadding;
    const int64_t paged_stride = int64_t{num_pages_} * kBlock + kTokenScalePadding;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    flat_k_token_scale_.assign(static_cast<size_t>(hkv * flat_stride), nan);
    flat_v_token_scale_ = flat_k_token_scale_;
    paged_k_token_scale_.assign(static_cast<size_t>(hkv * paged_stride), nan);
    paged_v_token_scale_ = paged_k_token_scale_;
    for (int b = 0; b < batch_; ++b) {
      for (int c = 0; c < o_.k_lens[b]; ++c) {
        const int64_t token = cu_k_[b] + c;
        const int64_t slot = int64_t{page_table_entry(b, c / kBlock)} * kBlock + c % kBlock;
        for (int h = 0; h < hkv; ++h) {
          const float k_scale = static_cast<float>(0.25 + 1.75 * uniform(0, 1000) / 1001.0);
          const float v_scale = static_cast<float>(0.25 + 1.75 * uniform(0, 1000) / 1001.0);
          flat_k_token_scale_[h * flat_stride + token] = k_scale;
          flat_v_token_scale_[h * flat_stride + token] = v_scale;
          paged_k_token_scale_[h * paged_stride + slot] = k_scale;
          paged_v_token_scale_[h * paged_stride + slot] = v_scale;
          double* key = &k_[(static_cast<size_t>(token) * hkv + h) * kHeadDim];
          double* value = &v_[(static_cast<size_t>(token) * hkv + h) * kHeadDim];
          for (int d = 0; d < kHeadDim; ++d) {
            key[d] *= k_scale;
            value[d] *= v_scale;
          }
        }
      }
    }
  }

  // Section 4 read literally: the keys of (request b, query i, KV head h), ascending.
  std::vector<int> visible_keys(int b, int i, int h, bool paged) const {
    const int row = cu_q_[b] + i;
    std::set<int> blocks;
    for (int slot = 0; slot < o_.topk; ++slot) {
      const int32_t id =
          indices_[(static_cast<size_t>(row) * o_.num_kv_heads + h) * o_.topk + slot];
      if (id < 0) break;
      if (id >= num_blocks(b)) continue;
      if (paged) {
        if (id >= table_columns_) continue;
        const int32_t page = page_table_[b * table_columns_ + id];
        if (page < 0 || page >= num_pages_) continue;
      }
      blocks.insert(id);
    }
    std::vector<int> keys;
    for (int block : blocks) {
      for (int c = block * kBlock; c < (block + 1) * kBlock && c < o_.k_lens[b]; ++c) {
        if (o_.causal && c > position(b, i)) continue;
        keys.push_back(c);
      }
    }
    return keys;
  }

  void evaluate_row(int b, int row, int head, int kv_head, const std::vector<int>& keys,
                    Expected& e) const {
    const int hq = o_.num_qo_heads, hkv = o_.num_kv_heads;
    const double* query = &q_[(static_cast<size_t>(row) * hq + head) * kHeadDim];
    std::vector<double> scores;
    double max_score = -std::numeric_limits<double>::infinity();
    for (int c : keys) {
      const double* key = &k_[(static_cast<size_t>(cu_k_[b] + c) * hkv + kv_head) * kHeadDim];
      double dot = 0.0;
      for (int d = 0; d < kHeadDim; ++d) dot += query[d] * key[d];
      scores.push_back(double{o_.softmax_scale} * o_.k_global_scale * dot);
      max_score = std::max(max_score, scores.back());
    }
    const double temperature = o_.lse_temperature_scale;
    double sum = 0.0, sum_t = 0.0;
    double* out = &e.out[(static_cast<size_t>(row) * hq + head) * kHeadDim];
    for (size_t n = 0; n < keys.size(); ++n) {
      const double p = std::exp(scores[n] - max_score);
      sum += p;
      sum_t += std::exp(temperature * (scores[n] - max_score));
      const double* value =
          &v_[(static_cast<size_t>(cu_k_[b] + keys[n]) * hkv + kv_head) * kHeadDim];
      for (int d = 0; d < kHeadDim; ++d) out[d] += p * value[d];
    }
    for (int d = 0; d < kHeadDim; ++d) out[d] *= o_.v_global_scale / sum;
    e.lse[static_cast<size_t>(row) * hq + head] = max_score + std::log(sum);
    e.lse_t[static_cast<size_t>(row) * hq + head] = temperature * max_score + std::log(sum_t);
  }

  CaseOptions o_;
  std::mt19937_64 rng_;
  int batch_ = 0, total_q_ = 0, total_k_ = 0, num_pages_ = 0, table_columns_ = 0;
  std::vector<int32_t> cu_q_, cu_k_, seqused_, page_table_, indices_;
  int64_t q_token_stride_ = 0;
  std::vector<uint16_t> q_bits_;
  std::vector<double> q_, k_, v_;  // logical values: q (total_q, Hq, D); k, v (total_k, Hkv, D)
  std::vector<uint8_t> k_stored_, v_stored_, k_scales_, v_scales_;  // per flat row
  std::vector<uint8_t> flat_kv_, paged_k_, paged_v_;
  std::vector<uint8_t> flat_k_scale_, flat_v_scale_, paged_k_scale_, paged_v_scale_;
  std::vector<uint8_t> page_local_k_scale_, page_local_v_scale_;
  static constexpr int64_t kTokenScalePadding = 3;  // floats between per-token scale rows
  std::vector<float> flat_k_token_scale_, flat_v_token_scale_;
  std::vector<float> paged_k_token_scale_, paged_v_token_scale_;
  std::vector<uint16_t> out_;
  std::vector<float> lse_, lse_t_;
};

}  // namespace flashmsa_test
