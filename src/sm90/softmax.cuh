// Online softmax over the blocks a warpgroup reads, for the two accumulator rows each thread
// holds (rows lane / 4 and lane / 4 + 8 of its warp's 16). The four lanes sharing a row hold 32
// of its 128 scores each; row statistics are combined with two xor-shuffles.
//
// Scores are scaled (by softmax_scale * k_global_scale * log2 e) before masking and before the
// max, so a negative softmax_scale is handled and masked keys are exactly -inf. A row that has
// seen no visible key keeps max = -inf; its exponentials use an offset of 0 instead of the max,
// so exp2(-inf) = 0 and no inf - inf = NaN ever appears (contract: such rows give 0 and -inf).
#pragma once

#include <math.h>

#include "sm90/mma.cuh"

namespace flashmsa::sm90 {

// 2^x in one MUFU.EX2, flushing results below 2^-126 to 0: exp2f adds a range check and a
// rescale per call (three more instructions on each of a thread's 64 scores), which only matter
// for subnormal probabilities, whose weight against the row's largest term (1) is below 2^-126.
// exp2(-inf) = 0 as before, so masked keys and empty rows behave as the contract says.
__device__ __forceinline__ float exp2_flush(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float max_over_row_quad(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float sum_over_row_quad(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <bool kTemperatureLse>
struct OnlineSoftmax {
  float row_max[2];    // running max of scaled scores (log2 units), -inf before any key
  float row_sum[2];    // this thread's partial sum of exp2(score - row_max)
  float row_sum_t[2];  // same for exp2(T * (score - row_max)), temperature LSE only

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[h] = -INFINITY;
      row_sum[h] = 0.f;
      row_sum_t[h] = 0.f;
    }
  }

  // Scales s, masks columns >= visible[h] of row h to -inf and turns s into probabilities
  // packed in 16-bit for the P.V product. Returns in `correction` the factor by which O must be
  // rescaled for the change of the running max; the caller applies it (rescale) once no P.V
  // wgmma that accumulates into O is in flight. kScores: 64 for a wgmma tile of 128 keys, 16
  // for a warp's 32 keys of the one-token decode consumer (decode_consumer.cuh); both lay
  // element 4 * j + 2 * h + c at row h, column 8 * j + 2 * (lane % 4) + c.
  template <typename Element, int kScores>
  __device__ __forceinline__ void update(float (&s)[kScores], const int (&visible)[2],
                                         float scale_log2, float temperature,
                                         uint32_t (&p)[kScores / 2], float (&correction)[2]) {
    float block_max[2];
    scale_and_mask(s, visible, scale_log2, block_max);
    exponentiate<Element>(s, block_max, temperature, p, correction);
  }

  // The first half of update: s scaled and masked, and each row's max over the quad's columns.
  template <int kScores>
  __device__ __forceinline__ static void scale_and_mask(float (&s)[kScores], const int (&visible)[2],
                                                        float scale_log2, float (&block_max)[2]) {
    constexpr int kTiles = kScores / 4;  // n-tiles of 8 columns
    const int column_base = 2 * (threadIdx.x % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float row_block_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& x = s[4 * j + 2 * h + c];
          x = (8 * j + column_base + c < visible[h]) ? x * scale_log2 : -INFINITY;
          row_block_max = fmaxf(row_block_max, x);
        }
      }
      block_max[h] = max_over_row_quad(row_block_max);
    }
  }

  // The second half: given the block's row maxima (over every column of the block that this
  // running max covers), s becomes probabilities and the running max and sums move on.
  template <typename Element, int kScores>
  __device__ __forceinline__ void exponentiate(float (&s)[kScores], const float (&block_max)[2],
                                               float temperature, uint32_t (&p)[kScores / 2],
                                               float (&correction)[2]) {
    constexpr int kTiles = kScores / 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float new_max = fmaxf(row_max[h], block_max[h]);
      const float offset = new_max == -INFINITY ? 0.f : new_max;
      correction[h] = exp2_flush(row_max[h] - offset);
      float sum = 0.f, sum_t = 0.f;
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& x = s[4 * j + 2 * h + c];
          if constexpr (kTemperatureLse) sum_t += exp2_flush(temperature * (x - offset));
          x = exp2_flush(x - offset);
          sum += x;
        }
      }
      row_sum[h] = row_sum[h] * correction[h] + sum;
      if constexpr (kTemperatureLse) {
        row_sum_t[h] = row_sum_t[h] * exp2_flush(temperature * (row_max[h] - offset)) + sum_t;
      }
      row_max[h] = new_max;
    }
#pragma unroll
    for (int i = 0; i < kScores / 2; ++i) p[i] = MmaAtoms<Element>::pack(s[2 * i], s[2 * i + 1]);
  }

  // O (a thread's accumulator: 64 values for a wgmma tile, 16 for a one-token warp's 32
  // columns; element 4 * j + 2 * h + c on row h) times correction[h].
  template <int kValues>
  __device__ __forceinline__ static void rescale(float (&o)[kValues],
                                                 const float (&correction)[2]) {
#pragma unroll
    for (int j = 0; j < kValues / 4; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        o[4 * j + 2 * h] *= correction[h];
        o[4 * j + 2 * h + 1] *= correction[h];
      }
    }
  }

  // This thread's two rows' sums, completed over the quad (the columns its warp read).
  __device__ __forceinline__ void quad_sums(float (&sum)[2], float (&sum_t)[2]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sum[h] = sum_over_row_quad(row_sum[h]);
      sum_t[h] = kTemperatureLse ? sum_over_row_quad(row_sum_t[h]) : 0.f;
    }
  }

  // Natural-log LSEs of the two rows from their complete sums (-inf for empty rows).
  __device__ __forceinline__ void lse_of_sums(const float (&sum)[2], const float (&sum_t)[2],
                                              float temperature, float (&lse)[2],
                                              float (&lse_t)[2]) const {
    constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      lse[h] = sum[h] > 0.f ? (row_max[h] + log2f(sum[h])) * kLn2 : -INFINITY;
      if constexpr (kTemperatureLse) {
        lse_t[h] = sum_t[h] > 0.f ? (temperature * row_max[h] + log2f(sum_t[h])) * kLn2
                                  : -INFINITY;
      } else {
        lse_t[h] = lse[h];
      }
    }
  }

  // Completes the row sums across the quad; returns natural-log LSEs (-inf for empty rows).
  __device__ __forceinline__ void finish(float (&lse)[2], float (&lse_t)[2], float (&sum)[2],
                                         float temperature) {
    float sum_t[2];
    quad_sums(sum, sum_t);
    lse_of_sums(sum, sum_t, temperature, lse, lse_t);
  }
};

}  // namespace flashmsa::sm90
