// flashmsa_merge_attention_states: the state over a union of disjoint key sets from the states
// over each set (include/flashmsa/flashmsa.h gives the formula). Validation, the CPU loop and the
// C entry points, in one file because the merge has no other backend yet: the Python package
// merges CUDA tensors with torch operations (python/flashmsa/merge.py).
//
// Each (row, head) is computed from its own inputs alone, in state order, so the result depends
// neither on the thread count nor on how rows are shared out: it is deterministic.
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "api/field_checks.h"
#include "api/guarded.h"
#include "common/error.h"
#include "common/float16.h"
#include "cpu/parallel.h"
#include "flashmsa/flashmsa.h"

namespace flashmsa {
namespace {

// Below this many output elements a call runs on the calling thread: starting threads costs
// more than merging a decode batch.
constexpr int64_t kElementsPerThread = int64_t{1} << 16;

std::string indexed(const char* field, int64_t i) {
  return std::string(field) + "[" + std::to_string(i) + "]";
}

// Checks everything visible on the host, in the struct's order, naming the first bad field.
// Never reads the tensors' memory.
void validate_merge_args(const flashmsa_merge_args* args) {
  if (args == nullptr) fail_invalid("args: must not be NULL");
  const int device = raw_enum(args->device);
  if (device != FLASHMSA_DEVICE_CPU && device != FLASHMSA_DEVICE_CUDA) {
    fail_field("device", "FLASHMSA_DEVICE_CPU (0) or FLASHMSA_DEVICE_CUDA (1)", device);
  }
  if (device == FLASHMSA_DEVICE_CUDA && args->device_index < 0) {
    fail_field("device_index", "a CUDA device ordinal >= 0", args->device_index);
  }
  if (args->num_states < 1) fail_field("num_states", "a count >= 1", args->num_states);
  require_non_negative(args->total_q, "total_q");
  require_non_negative(args->num_heads, "num_heads");
  require_non_negative(args->head_dim, "head_dim");
  const int dtype = raw_enum(args->dtype);
  if (dtype != FLASHMSA_MERGE_DTYPE_BF16 && dtype != FLASHMSA_MERGE_DTYPE_FP16 &&
      dtype != FLASHMSA_MERGE_DTYPE_FP32) {
    fail_field("dtype", "FLASHMSA_MERGE_DTYPE_BF16 (0), _FP16 (1) or _FP32 (4)", dtype);
  }
  int64_t rows = 0, elements = 0;
  if (__builtin_mul_overflow(args->total_q, args->num_heads, &rows) ||
      __builtin_mul_overflow(rows, args->head_dim, &elements)) {
    fail_invalid("total_q/num_heads/head_dim: the element count overflows int64");
  }
  const struct {
    const void* pointer;
    const char* field;
  } arrays[] = {
      {args->partial_outs, "partial_outs"},
      {args->partial_out_stride_token, "partial_out_stride_token"},
      {args->partial_out_stride_head, "partial_out_stride_head"},
      {args->partial_lses, "partial_lses"},
      {args->partial_lse_stride_token, "partial_lse_stride_token"},
      {args->partial_lse_stride_head, "partial_lse_stride_head"},
  };
  for (const auto& array : arrays) {
    require_pointer(array.pointer, array.field, "(an array of num_states entries)");
  }
  // Pointers to tensors with no elements may be NULL (an empty torch tensor's data_ptr() is 0).
  for (int64_t i = 0; i < args->num_states; ++i) {
    if (elements > 0) {
      require_pointer(args->partial_outs[i], indexed("partial_outs", i), "when out has elements");
    }
    if (rows > 0) {
      require_pointer(args->partial_lses[i], indexed("partial_lses", i),
                      "when total_q * num_heads > 0");
    }
  }
  if (elements > 0) require_pointer(args->out, "out", "when it has elements");
}

// One element of the partials' and out's dtype, loaded and stored as fp32.
template <int kDtype>
struct Element {
  static float load(const void* base, int64_t index) {
    if constexpr (kDtype == FLASHMSA_MERGE_DTYPE_FP32) {
      return static_cast<const float*>(base)[index];
    } else {
      const uint16_t bits = static_cast<const uint16_t*>(base)[index];
      return kDtype == FLASHMSA_MERGE_DTYPE_BF16 ? bf16_to_float(bits) : fp16_to_float(bits);
    }
  }

  static void store(void* base, int64_t index, float value) {
    if constexpr (kDtype == FLASHMSA_MERGE_DTYPE_FP32) {
      static_cast<float*>(base)[index] = value;
    } else {
      static_cast<uint16_t*>(base)[index] =
          kDtype == FLASHMSA_MERGE_DTYPE_BF16 ? float_to_bf16(value) : float_to_fp16(value);
    }
  }
};

template <int kDtype>
class MergeRun {
 public:
  explicit MergeRun(const flashmsa_merge_args& args) : args_(args) {}

  void run() {
    const int64_t items = args_.total_q * args_.num_heads;  // validated not to overflow
    if (items == 0) return;
    const int64_t elements = items * std::max<int64_t>(args_.head_dim, 1) * args_.num_states;
    const int64_t threads =
        std::clamp<int64_t>(elements / kElementsPerThread, 1, hardware_threads());
    // Rows are handed out in chunks so that threads do not share cache lines of out.
    const int64_t chunk = std::max<int64_t>(1, 256 / std::max<int64_t>(args_.num_heads, 1));
    const int64_t chunks = (args_.total_q + chunk - 1) / chunk;
    parallel_for(
        chunks, threads,
        [&] {
          return std::make_pair(std::vector<float>(static_cast<size_t>(args_.num_states)),
                                std::vector<float>(static_cast<size_t>(args_.head_dim)));
        },
        [&](int64_t c, std::pair<std::vector<float>, std::vector<float>>& buffers) {
          const int64_t end = std::min(args_.total_q, (c + 1) * chunk);
          for (int64_t row = c * chunk; row < end; ++row) {
            for (int64_t head = 0; head < args_.num_heads; ++head) {
              merge_one(row, head, buffers.first.data(), buffers.second.data());
            }
          }
        });
  }

 private:
  // One (row, head). Every input of it is read before anything of it is written, which is what
  // makes a merge into one of the partials (out == partial_outs[i]) safe.
  void merge_one(int64_t row, int64_t head, float* weights, float* accumulator) const {
    const int64_t n = args_.num_states;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) {
      const float lse = args_.partial_lses[i][row * args_.partial_lse_stride_token[i] +
                                              head * args_.partial_lse_stride_head[i]];
      weights[i] = lse;
      m = std::max(m, lse);
    }
    const int64_t out_base = row * args_.out_stride_token + head * args_.out_stride_head;
    if (m == -std::numeric_limits<float>::infinity()) {
      // No state read a key: the union reads none either (contract section 6).
      for (int64_t d = 0; d < args_.head_dim; ++d) {
        Element<kDtype>::store(args_.out, out_base + d, 0.0f);
      }
      write_lse(row, head, -std::numeric_limits<float>::infinity());
      return;
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      // exp(-inf - m) is 0 for finite m: a state that read nothing weighs nothing.
      weights[i] = std::exp(weights[i] - m);
      sum += weights[i];
    }
    // The largest weight is exp(0) = 1, so sum >= 1: the log is finite, the division safe.
    const float inverse = 1.0f / sum;
    std::fill(accumulator, accumulator + args_.head_dim, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      // Skipped rather than multiplied by 0, so that what a weightless state's out holds (the
      // uninitialised output of a call that read nothing, say) cannot turn into NaN here.
      if (!(weights[i] > 0.0f)) continue;
      const float scale = weights[i] * inverse;
      const void* partial = args_.partial_outs[i];
      const int64_t base =
          row * args_.partial_out_stride_token[i] + head * args_.partial_out_stride_head[i];
      for (int64_t d = 0; d < args_.head_dim; ++d) {
        accumulator[d] += scale * Element<kDtype>::load(partial, base + d);
      }
    }
    for (int64_t d = 0; d < args_.head_dim; ++d) {
      Element<kDtype>::store(args_.out, out_base + d, accumulator[d]);
    }
    write_lse(row, head, m + std::log(sum));
  }

  void write_lse(int64_t row, int64_t head, float value) const {
    if (args_.lse == nullptr) return;
    args_.lse[row * args_.lse_stride_token + head * args_.lse_stride_head] = value;
  }

  const flashmsa_merge_args& args_;
};

void merge_attention_states(const flashmsa_merge_args* args) {
  validate_merge_args(args);
  if (args->device == FLASHMSA_DEVICE_CUDA) {
    fail_not_supported(
        "device: the C entry merges CPU tensors only so far (a CUDA path is planned); "
        "flashmsa.merge_attention_states merges CUDA tensors with torch operations");
  }
  switch (raw_enum(args->dtype)) {
    case FLASHMSA_MERGE_DTYPE_BF16:
      MergeRun<FLASHMSA_MERGE_DTYPE_BF16>(*args).run();
      break;
    case FLASHMSA_MERGE_DTYPE_FP16:
      MergeRun<FLASHMSA_MERGE_DTYPE_FP16>(*args).run();
      break;
    default:  // validated: FP32
      MergeRun<FLASHMSA_MERGE_DTYPE_FP32>(*args).run();
      break;
  }
}

}  // namespace
}  // namespace flashmsa

FLASHMSA_API void flashmsa_merge_args_init(flashmsa_merge_args* args) {
  if (args == nullptr) return;
  *args = flashmsa_merge_args{};  // zero sizes and strides, NULL pointers
  args->device = FLASHMSA_DEVICE_CPU;
  args->device_index = 0;
  args->stream = nullptr;
  args->dtype = FLASHMSA_MERGE_DTYPE_BF16;
}

FLASHMSA_API flashmsa_status flashmsa_merge_attention_states(const flashmsa_merge_args* args) {
  return flashmsa::run_guarded([&] { flashmsa::merge_attention_states(args); });
}
