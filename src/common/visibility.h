// Which keys a query reads (contract sections 4 and 5), as one set of __host__ __device__ rules
// used by the CPU reference and the Hopper kernels alike, so that they cannot disagree.
//
// Every value read from user memory (sequence lengths, offsets, block ids, page ids) is treated
// as untrusted: each rule clamps or rejects so that no value leads to an out-of-bounds access.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define FLASHMSA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FLASHMSA_HOST_DEVICE inline
#endif

namespace flashmsa {

constexpr int kBlockSize = 128;  // tokens per selectable block (= page size of a paged cache)

// A request's query rows [begin, end) in the concatenated q, clamped into [0, total_q] so that
// garbage prefix sums yield an empty or partial range, never an out-of-bounds one.
struct RowRange {
  int64_t begin;
  int64_t end;
};

FLASHMSA_HOST_DEVICE int64_t clamp_i64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

FLASHMSA_HOST_DEVICE RowRange clamped_range(const int32_t* cu_seqlens, int64_t b, int64_t total) {
  int64_t begin = clamp_i64(cu_seqlens[b], 0, total);
  int64_t end = clamp_i64(cu_seqlens[b + 1], begin, total);
  return {begin, end};
}

// Page-table columns past 2^24 hold no block of any int32 key length, so callers may clamp the
// table width to this (and must, for max_pages * 128 to stay far from overflow).
constexpr int64_t kMaxTablePages = int64_t{1} << 24;

// Key lengths of request b:
//   readable: the keys that may be read. Flat: the row range of cu_seqlens_k clamped into k's
//     rows. Paged: seqused_k clamped into [0, max_pages * 128] (blocks past the table don't
//     exist; max_pages <= kMaxTablePages).
//   declared: seqlen_k as the contract defines it (section 4), which the default q_offset is
//     derived from. Paged: seqused_k itself, past the table too (rule 2 drops the blocks past
//     it, but the queries keep the positions of the whole sequence). Flat: readable.
struct KeyLengths {
  int64_t readable, declared;
};

FLASHMSA_HOST_DEVICE KeyLengths request_key_lengths(bool is_paged, const int32_t* cu_seqlens_k,
                                                    const int32_t* seqused_k, int64_t b,
                                                    int64_t total_k, int64_t max_pages) {
  if (is_paged) {
    const int64_t used = seqused_k[b];
    return {clamp_i64(used, 0, max_pages * kBlockSize), used};
  }
  const RowRange r = clamped_range(cu_seqlens_k, b, total_k);
  return {r.end - r.begin, r.end - r.begin};
}

FLASHMSA_HOST_DEVICE int64_t num_blocks(int64_t seqlen_k) {
  return (seqlen_k + kBlockSize - 1) / kBlockSize;
}

// Causal position of a request's first query (contract section 5), `seqlen_k` the declared
// length (request_key_lengths). The scalar and per-request offsets are taken as given (negative
// positions read nothing).
FLASHMSA_HOST_DEVICE int64_t first_query_position(int q_offset_mode, int64_t q_offset_value,
                                                  const int32_t* q_offset_per_request, int64_t b,
                                                  int64_t seqlen_q, int64_t seqlen_k) {
  // A scalar offset comes from a Python int: keep it far from int64 overflow when positions of
  // later rows are added to it (any |offset| beyond 2^62 already means "all" or "nothing").
  constexpr int64_t kPositionBound = int64_t{1} << 62;
  if (q_offset_mode == 1) return clamp_i64(q_offset_value, -kPositionBound, kPositionBound);
  if (q_offset_mode == 2) return q_offset_per_request[b];
  return seqlen_k - seqlen_q;
}

// The last key a query may read, exclusive: min(seqlen_k, pos + 1) when causal.
// A result <= 0 means the query reads nothing.
FLASHMSA_HOST_DEVICE int64_t key_limit(bool causal, int64_t pos, int64_t seqlen_k) {
  if (!causal) return seqlen_k;
  return pos < seqlen_k ? pos + 1 : seqlen_k;  // no pos + 1 overflow for huge positions
}

// How many leading entries of its index row a query at causal position `pos` may read: all
// topk, or with the causal entry limit (this project's extension, the rule of vLLM's MiniMax-M3
// kernels) only the entries c with c * 128 <= pos, min(topk, pos / 128 + 1), and none at a
// negative position. Rule 1 (the first negative entry) may end the row earlier.
FLASHMSA_HOST_DEVICE int32_t entries_read(bool causal_entry_limit, int64_t pos, int32_t topk) {
  if (!causal_entry_limit) return topk;
  if (pos < 0) return 0;
  const int64_t reach = pos / kBlockSize + 1;
  return reach < topk ? static_cast<int32_t>(reach) : topk;
}

// Whether block id `block` (already past the first-negative cut) selects anything for a query
// whose readable keys are [0, limit). Covers rule 2 of section 4 (ids past the request's blocks
// or past the page table) and drops blocks wholly beyond the causal limit, which read nothing.
FLASHMSA_HOST_DEVICE bool block_selects_keys(int64_t block, int64_t limit, bool is_paged,
                                             int64_t max_pages) {
  if (block < 0) return false;
  if (is_paged && block >= max_pages) return false;
  return block * kBlockSize < limit;
}

// Page holding block `block` of request b on the paged path, or -1 when the table entry is not
// a valid page (such a block reads nothing instead of reading out of bounds).
FLASHMSA_HOST_DEVICE int64_t page_of_block(const int32_t* page_table, int64_t stride_batch,
                                           int64_t stride_page, int64_t b, int64_t block,
                                           int64_t num_pages) {
  int64_t page = page_table[b * stride_batch + block * stride_page];
  return (page >= 0 && page < num_pages) ? page : -1;
}

}  // namespace flashmsa
