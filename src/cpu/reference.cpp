// The CPU reference backend: the whole contract on host memory, fp32 arithmetic.
//
// Work is cut into items of (KV head, chunk of consecutive query rows). An item visits the
// union of its rows' selected blocks in ascending order, decodes each block's K and V once, and
// feeds it to every (row, query head of the group) that selected it, each of which keeps its own
// online-softmax state. A row's arithmetic therefore depends only on its own sorted selected
// set, never on the chunking, the thread count or the layout: results are deterministic and a
// paged call gives bitwise the same output as a flat call on the same logical data.
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "api/backends.h"
#include "common/float16.h"
#include "common/visibility.h"
#include "cpu/kv_reader.h"
#include "cpu/parallel.h"

namespace flashmsa {
namespace {

using cpu::kHeadDim;
using cpu::KvReader;

constexpr int64_t kRowsPerItem = 16;  // rows sharing one decode of their blocks' union
constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();
// Causal positions are clamped into this range: beyond it every key (or none) is visible, and
// the clamp keeps `position + 1` and `position + row` far from int64 overflow.
constexpr int64_t kMaxPosition = int64_t{1} << 62;

// What the rows of one request need, read once from the (untrusted) host copies of
// cu_seqlens_q, cu_seqlens_k / seqused_k and q_offset, clamped through visibility.h.
struct Request {
  int64_t q_begin = 0;         // first query row in q
  int64_t k_begin = 0;         // flat: first key row in k
  int64_t seqlen_k = 0;        // keys that may be read
  int64_t first_position = 0;  // causal position of the first query row
};

// One query row's selected set, after the rules of contract section 4.
struct RowSelection {
  int64_t row = 0;         // index into q / out
  int64_t key_limit = 0;   // keys [0, key_limit) of the request may be read
  int32_t num_blocks = 0;  // entries used in `blocks`
  int32_t cursor = 0;      // next entry of `blocks` while the union is walked
  int32_t blocks[64];      // ascending, distinct, each selecting at least one key
};

// Online-softmax state of one (row, query head), fp32 throughout.
struct RowState {
  float max_score;  // running max of s over the keys seen so far
  float sum;        // sum of exp(s - max_score)
  float sum_t;      // sum of exp(T * s - T * max_score)
  float accumulator[kHeadDim];
};

float load_half(const void* base, int64_t element, flashmsa_dtype dtype) {
  uint16_t bits;
  memcpy(&bits, static_cast<const uint8_t*>(base) + element * 2, sizeof(bits));
  return dtype == FLASHMSA_DTYPE_BF16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

void store_half(void* base, int64_t element, flashmsa_dtype dtype, float value) {
  const uint16_t bits = dtype == FLASHMSA_DTYPE_BF16 ? float_to_bf16(value) : float_to_fp16(value);
  memcpy(static_cast<uint8_t*>(base) + element * 2, &bits, sizeof(bits));
}

// A global scale (contract section 6): the float `in_memory` points at when the caller keeps it
// in (here: host) memory, else the argument's float. Read once when the call starts.
float global_scale(float value, const float* in_memory) {
  return in_memory != nullptr ? *in_memory : value;
}

// Eight independent partial sums let the compiler vectorise without reassociating the sum, so
// the result is the same on every run.
float dot(const float* a, const float* b) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int d = 0; d < kHeadDim; d += 8) {
    for (int lane = 0; lane < 8; ++lane) partial[lane] += a[d + lane] * b[d + lane];
  }
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

class ReferenceRun {
 public:
  explicit ReferenceRun(const flashmsa_args& args)
      : args_(args),
        paged_(args.is_paged != 0),
        max_pages_(std::min(args.max_pages_per_request, kMaxTablePages)),
        group_size_(args.num_qo_heads / args.num_kv_heads),
        score_scale_(args.softmax_scale *
                     global_scale(args.k_global_scale, args.k_global_scale_device)),
        v_global_scale_(global_scale(args.v_global_scale, args.v_global_scale_device)),
        key_reader_(args, /*is_key=*/true),
        value_reader_(args, /*is_key=*/false) {
    read_requests();
  }

  void run() {
    const int64_t chunks = (args_.total_q + kRowsPerItem - 1) / kRowsPerItem;
    const int64_t items = chunks * args_.num_kv_heads;
    parallel_for(
        items, hardware_threads(), [&] { return Scratch(group_size_); },
        [&](int64_t item, Scratch& scratch) {
          const int64_t kv_head = item % args_.num_kv_heads;
          const int64_t row_begin = (item / args_.num_kv_heads) * kRowsPerItem;
          run_chunk(kv_head, row_begin, std::min(row_begin + kRowsPerItem, args_.total_q),
                    scratch);
        });
  }

 private:
  // Per-thread buffers, reused across items.
  struct Scratch {
    explicit Scratch(int64_t group_size)
        : queries(kRowsPerItem * group_size * kHeadDim),
          states(kRowsPerItem * group_size),
          selections(kRowsPerItem),
          keys(kBlockSize * kHeadDim),
          values(kBlockSize * kHeadDim) {}
    std::vector<float> queries;    // [row in chunk][head in group][d]
    std::vector<RowState> states;  // [row in chunk][head in group]
    std::vector<RowSelection> selections;
    std::vector<int32_t> block_union;
    std::vector<float> keys;    // [token in block][d], the block being visited
    std::vector<float> values;  // [token in block][d]
    float scores[kBlockSize];
  };

  void read_requests() {
    const int64_t batch = args_.batch_size;
    requests_.resize(batch);
    // The request that owns each query row; -1 for rows outside every request's range, which
    // read nothing. With overlapping (garbage) ranges the last request wins, so every row is
    // written by exactly one item.
    row_owner_.assign(args_.total_q, -1);
    for (int64_t b = 0; b < batch; ++b) {
      const RowRange q_rows = clamped_range(args_.cu_seqlens_q, b, args_.total_q);
      Request& request = requests_[b];
      request.q_begin = q_rows.begin;
      const KeyLengths lengths = request_key_lengths(paged_, args_.cu_seqlens_k, args_.seqused_k,
                                                     b, args_.total_k, max_pages_);
      request.seqlen_k = lengths.readable;
      request.k_begin = paged_ ? 0 : clamped_range(args_.cu_seqlens_k, b, args_.total_k).begin;
      const int64_t position = first_query_position(args_.q_offset_mode, args_.q_offset_value,
                                                    args_.q_offset_per_request, b,
                                                    q_rows.end - q_rows.begin, lengths.declared);
      request.first_position = clamp_i64(position, -kMaxPosition, kMaxPosition);
      for (int64_t row = q_rows.begin; row < q_rows.end; ++row) {
        row_owner_[row] = static_cast<int32_t>(b);
      }
    }
  }

  // Rows [row_begin, row_end) for one KV head, split into runs of rows of the same request.
  void run_chunk(int64_t kv_head, int64_t row_begin, int64_t row_end, Scratch& scratch) {
    int64_t run_begin = row_begin;
    while (run_begin < row_end) {
      int64_t run_end = run_begin + 1;
      while (run_end < row_end && row_owner_[run_end] == row_owner_[run_begin]) ++run_end;
      run_rows(kv_head, row_owner_[run_begin], run_begin, run_end, scratch);
      run_begin = run_end;
    }
  }

  // Builds `selection` for `row` of `request` (rules 1-3 of section 4 plus the causal limit, and
  // the causal entry limit when asked for).
  void select_blocks(int64_t kv_head, int64_t request_index, int64_t row,
                     RowSelection& selection) const {
    const Request& request = requests_[request_index];
    const int64_t position = request.first_position + (row - request.q_begin);
    selection.row = row;
    selection.key_limit = key_limit(args_.causal != 0, position, request.seqlen_k);
    selection.num_blocks = 0;
    selection.cursor = 0;
    const int32_t* indices =
        args_.q2k_indices + kv_head * args_.idx_stride_head + row * args_.idx_stride_token;
    const int32_t entries = entries_read(args_.causal_entry_limit != 0, position, args_.topk);
    for (int64_t slot = 0; slot < entries; ++slot) {
      const int32_t block = indices[slot * args_.idx_stride_topk];
      if (block < 0) break;  // the first negative entry ends the list
      if (!block_selects_keys(block, selection.key_limit, paged_, max_pages_)) {
        continue;
      }
      if (paged_ && page_of_block(request_index, block) < 0) continue;
      selection.blocks[selection.num_blocks++] = block;
    }
    int32_t* first = selection.blocks;
    std::sort(first, first + selection.num_blocks);
    selection.num_blocks =
        static_cast<int32_t>(std::unique(first, first + selection.num_blocks) - first);
  }

  int64_t page_of_block(int64_t request_index, int64_t block) const {
    return flashmsa::page_of_block(args_.page_table, args_.page_table_stride_batch,
                                   args_.page_table_stride_page, request_index, block,
                                   args_.num_pages);
  }

  // Decodes keys [0, num_keys) of `block` of a request into scratch.keys / scratch.values.
  void decode_block(int64_t kv_head, int64_t request_index, int64_t block, int64_t num_keys,
                    Scratch& scratch) const {
    const int64_t page = paged_ ? page_of_block(request_index, block) : -1;
    const int64_t first_token = requests_[request_index].k_begin + block * kBlockSize;
    for (int64_t key = 0; key < num_keys; ++key) {
      float* key_row = &scratch.keys[key * kHeadDim];
      float* value_row = &scratch.values[key * kHeadDim];
      if (paged_) {
        key_reader_.read_paged(page, kv_head, key, key_row);
        value_reader_.read_paged(page, kv_head, key, value_row);
      } else {
        key_reader_.read_flat(first_token + key, kv_head, key_row);
        value_reader_.read_flat(first_token + key, kv_head, value_row);
      }
    }
  }

  // Adds keys [0, num_keys) of the decoded block to one (row, query head) state.
  void accumulate(const float* query, int64_t num_keys, RowState& state, Scratch& scratch) const {
    float* scores = scratch.scores;
    float block_max = kNegativeInfinity;
    for (int64_t key = 0; key < num_keys; ++key) {
      scores[key] = score_scale_ * dot(query, &scratch.keys[key * kHeadDim]);
      block_max = std::max(block_max, scores[key]);
    }
    // All scores -inf (only from overflowing inputs): the block adds exp(-inf) = 0 everywhere;
    // skipping it avoids exp(-inf - -inf) = NaN.
    if (block_max == kNegativeInfinity) return;
    const float new_max = std::max(state.max_score, block_max);
    // exp(-inf) = 0 on the first block: the empty state is simply discarded.
    const float rescale = std::exp(state.max_score - new_max);
    if (args_.lse_t != nullptr) {
      const float temperature = args_.lse_temperature_scale;
      float sum_t = 0.0f;
      for (int64_t key = 0; key < num_keys; ++key) {
        sum_t += std::exp(temperature * scores[key] - temperature * new_max);
      }
      state.sum_t =
          state.sum_t * std::exp(temperature * state.max_score - temperature * new_max) + sum_t;
    }
    float sum = 0.0f;
    for (int64_t key = 0; key < num_keys; ++key) {
      scores[key] = std::exp(scores[key] - new_max);  // now the unnormalised probability
      sum += scores[key];
    }
    state.sum = state.sum * rescale + sum;
    state.max_score = new_max;
    for (int d = 0; d < kHeadDim; ++d) state.accumulator[d] *= rescale;
    for (int64_t key = 0; key < num_keys; ++key) {
      const float probability = scores[key];
      const float* value_row = &scratch.values[key * kHeadDim];
      for (int d = 0; d < kHeadDim; ++d) state.accumulator[d] += probability * value_row[d];
    }
  }

  // Rows [row_begin, row_end) of request `request_index` (-1: no request) for one KV head.
  void run_rows(int64_t kv_head, int64_t request_index, int64_t row_begin, int64_t row_end,
                Scratch& scratch) const {
    const int64_t num_rows = row_end - row_begin;
    for (int64_t r = 0; r < num_rows; ++r) {
      RowSelection& selection = scratch.selections[r];
      if (request_index >= 0) {
        select_blocks(kv_head, request_index, row_begin + r, selection);
      } else {
        selection = RowSelection{};
        selection.row = row_begin + r;
      }
      for (int64_t g = 0; g < group_size_; ++g) {
        const int64_t head = kv_head * group_size_ + g;
        RowState& state = scratch.states[r * group_size_ + g];
        state.max_score = kNegativeInfinity;
        state.sum = 0.0f;
        state.sum_t = 0.0f;
        std::fill(state.accumulator, state.accumulator + kHeadDim, 0.0f);
        if (selection.num_blocks == 0) continue;  // q is not read for rows that read nothing
        float* query = &scratch.queries[(r * group_size_ + g) * kHeadDim];
        const int64_t first = selection.row * args_.q_stride_token + head * args_.q_stride_head;
        for (int d = 0; d < kHeadDim; ++d) query[d] = load_half(args_.q, first + d, args_.q_dtype);
      }
    }

    // The union of the rows' sets, ascending: each block is decoded once for all of them.
    scratch.block_union.clear();
    for (int64_t r = 0; r < num_rows; ++r) {
      const RowSelection& selection = scratch.selections[r];
      scratch.block_union.insert(scratch.block_union.end(), selection.blocks,
                                 selection.blocks + selection.num_blocks);
    }
    std::vector<int32_t>& block_union = scratch.block_union;
    std::sort(block_union.begin(), block_union.end());
    block_union.erase(std::unique(block_union.begin(), block_union.end()), block_union.end());

    for (const int32_t block : block_union) {
      const int64_t block_start = int64_t{block} * kBlockSize;
      // Decode only the keys some selecting row may read.
      int64_t keys_needed = 0;
      for (int64_t r = 0; r < num_rows; ++r) {
        const RowSelection& selection = scratch.selections[r];
        if (selection.cursor < selection.num_blocks &&
            selection.blocks[selection.cursor] == block) {
          keys_needed = std::max(keys_needed, selection.key_limit - block_start);
        }
      }
      keys_needed = std::min<int64_t>(keys_needed, kBlockSize);
      decode_block(kv_head, request_index, block, keys_needed, scratch);
      for (int64_t r = 0; r < num_rows; ++r) {
        RowSelection& selection = scratch.selections[r];
        if (selection.cursor >= selection.num_blocks ||
            selection.blocks[selection.cursor] != block) {
          continue;
        }
        ++selection.cursor;
        const int64_t num_keys = std::min<int64_t>(selection.key_limit - block_start, kBlockSize);
        for (int64_t g = 0; g < group_size_; ++g) {
          accumulate(&scratch.queries[(r * group_size_ + g) * kHeadDim], num_keys,
                     scratch.states[r * group_size_ + g], scratch);
        }
      }
    }

    for (int64_t r = 0; r < num_rows; ++r) {
      for (int64_t g = 0; g < group_size_; ++g) {
        write_row(row_begin + r, kv_head * group_size_ + g, scratch.states[r * group_size_ + g]);
      }
    }
  }

  // Normalises one state into out, lse and lse_t. A state that saw no key has sum 0 and gives
  // out = 0 exactly and lse = lse_t = -inf (section 6), never 0/0.
  void write_row(int64_t row, int64_t head, const RowState& state) const {
    const bool empty = !(state.sum > 0.0f);
    const float normaliser = empty ? 0.0f : v_global_scale_ / state.sum;
    const int64_t first = row * args_.out_stride_token + head * args_.out_stride_head;
    for (int d = 0; d < kHeadDim; ++d) {
      store_half(args_.out, first + d, args_.q_dtype, state.accumulator[d] * normaliser);
    }
    if (args_.lse != nullptr) {
      args_.lse[row * args_.lse_stride_token + head * args_.lse_stride_head] =
          empty ? kNegativeInfinity : state.max_score + std::log(state.sum);
    }
    if (args_.lse_t != nullptr) {
      args_.lse_t[row * args_.lse_t_stride_token + head * args_.lse_t_stride_head] =
          empty ? kNegativeInfinity
                : args_.lse_temperature_scale * state.max_score + std::log(state.sum_t);
    }
  }

  const flashmsa_args& args_;
  const bool paged_;
  const int64_t max_pages_;  // the table's width, clamped to the columns any length can use
  const int64_t group_size_;
  const float score_scale_;  // softmax_scale * k_global_scale
  const float v_global_scale_;
  const KvReader key_reader_;
  const KvReader value_reader_;
  std::vector<Request> requests_;
  std::vector<int32_t> row_owner_;
};

}  // namespace

void run_cpu(const flashmsa_args& args) { ReferenceRun(args).run(); }

}  // namespace flashmsa
