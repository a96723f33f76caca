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

// log2(x) and 1/x in one MUFU instruction each, flushing subnormals, for x in [1, 2^24]: the sum
// of a row's exponentials, whose largest term is exactly 1, and the sum of the split weights
// in the cluster combine. log2f and the IEEE division add range checks, rescales and a
// slow-path call to code that runs once per CTA, cold.
__device__ __forceinline__ float log2_flush(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float reciprocal_flush(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float max_over_row_quad(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float sum_over_row_quad(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

struct NothingBeforePack {
  template <int kScores>
  __device__ __forceinline__ void operator()(float (&)[kScores]) const {}
};

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
  // element 4 * j + 2 * h + c at row h, column 8 * j + 2 * (lane % 4) + c. before_pack(s) sees
  // the probabilities once the row sums have taken them (per-token V scales, token_scales.cuh).
  template <typename Element, int kScores, typename BeforePack = NothingBeforePack>
  __device__ __forceinline__ void update(float (&s)[kScores], const int (&visible)[2],
                                         float scale_log2, float temperature,
                                         uint32_t (&p)[kScores / 2], float (&correction)[2],
                                         BeforePack before_pack = {}) {
    // Row by row, each row's exponentials right after its max (the schedule the wgmma consumer
    // was tuned with; the one-token consumer needs both rows' maxima first and calls the halves
    // itself).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // A row that sees every key of the block (all but the causal edge's and the sequence
      // end's blocks) needs no mask: its scores are only scaled, the same values without the
      // two instructions per score of the column test.
      const float row_block_max =
          visible[h] >= kScores * 2
              ? scale_and_mask_row</*kMasked=*/false>(s, h, visible[h], scale_log2)
              : scale_and_mask_row(s, h, visible[h], scale_log2);
      const float block_max = max_over_row_quad(row_block_max);
      correction[h] = exponentiate_row(s, h, block_max, temperature);
    }
    before_pack(s);
    pack_probabilities<Element>(s, p);
  }

  // The first half of update for row h: its scores scaled, columns >= visible masked to -inf,
  // and their max over this thread's columns (the caller reduces it over the quad, or further).
  // kMasked = false: the caller knows every column is visible, so the column test is left out.
  template <bool kMasked = true, int kScores>
  __device__ __forceinline__ static float scale_and_mask_row(float (&s)[kScores], int h,
                                                             int visible, float scale_log2) {
    constexpr int kTiles = kScores / 4;  // n-tiles of 8 columns
    const int column_base = 2 * (threadIdx.x % 4);
    float row_block_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float& x = s[4 * j + 2 * h + c];
        x = (!kMasked || 8 * j + column_base + c < visible) ? x * scale_log2 : -INFINITY;
        row_block_max = fmaxf(row_block_max, x);
      }
    }
    return row_block_max;
  }

  // The second half for row h: given the block's max of the row (over every column this running
  // max covers), its scores become probabilities and the running max and sums move on; returns
  // the factor by which the row's O must be rescaled.
  template <int kScores>
  __device__ __forceinline__ float exponentiate_row(float (&s)[kScores], int h, float block_max,
                                                    float temperature) {
    constexpr int kTiles = kScores / 4;
    const float new_max = fmaxf(row_max[h], block_max);
    const float offset = new_max == -INFINITY ? 0.f : new_max;
    const float correction = exp2_flush(row_max[h] - offset);
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
    row_sum[h] = row_sum[h] * correction + sum;
    if constexpr (kTemperatureLse) {
      row_sum_t[h] = row_sum_t[h] * exp2_flush(temperature * (row_max[h] - offset)) + sum_t;
    }
    row_max[h] = new_max;
    return correction;
  }

  // Probabilities packed in 16-bit for the P V product, in S's accumulator order.
  template <typename Element, int kScores>
  __device__ __forceinline__ static void pack_probabilities(const float (&s)[kScores],
                                                            uint32_t (&p)[kScores / 2]) {
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
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      lse[h] = row_lse(h, sum[h]);
      lse_t[h] = kTemperatureLse ? row_lse_t(h, sum_t[h], temperature) : lse[h];
    }
  }

  // Completes the row sums across the quad; returns natural-log LSEs (-inf for empty rows).
  __device__ __forceinline__ void finish(float (&lse)[2], float (&lse_t)[2], float (&sum)[2],
                                         float temperature) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sum[h] = sum_over_row_quad(row_sum[h]);
      lse[h] = row_lse(h, sum[h]);
      lse_t[h] = kTemperatureLse
                     ? row_lse_t(h, sum_over_row_quad(row_sum_t[h]), temperature)
                     : lse[h];
    }
  }

 private:
  __device__ __forceinline__ float row_lse(int h, float sum) const {
    return sum > 0.f ? (row_max[h] + log2_flush(sum)) * kLn2 : -INFINITY;
  }
  __device__ __forceinline__ float row_lse_t(int h, float sum_t, float temperature) const {
    return sum_t > 0.f ? (temperature * row_max[h] + log2_flush(sum_t)) * kLn2 : -INFINITY;
  }
};

}  // namespace flashmsa::sm90
