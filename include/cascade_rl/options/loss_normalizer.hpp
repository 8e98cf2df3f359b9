#pragma once
// How a step's token losses are aggregated (loss_aggregation), the divisors of one
// optimizer step (loss_normalizer) and the counts they are made from (loss_counts, what
// local_loss_counts in algorithms/loss_aggregation.hpp returns): plain values that the
// terms, every executor's driver and the kernels take as they are.

#include <cstddef>

#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

enum class loss_aggregation {
  token_mean,
  token_sum,
  seq_mean_token_sum,
  seq_mean_token_mean,
  seq_mean_token_sum_norm,
};

// The divisors of one optimizer step, made for one aggregation mode: a loss refuses a
// normaliser of another mode (a divisor that means something else). `tokens` and
// `sequences` are totals over every micro-batch and rank that contributes to the step
// (all-reduce local_loss_counts, then loss_counts::normalizer(mode)); `scale` is
// seq-mean-token-sum-norm's constant (veRL: the padded response length), which has no
// default: that mode refuses a normaliser without one. Only the fields the mode uses are
// read.
struct loss_normalizer {
  loss_aggregation mode = loss_aggregation::token_mean;
  double tokens = 0;
  double sequences = 0;
  double scale = 0;
};

// Counts of one slice of a step. Sum them over slices (operator+=) or all-reduce them,
// then turn the total into a loss_normalizer.
struct loss_counts {
  std::size_t tokens = 0;     // valid (unmasked) tokens
  std::size_t sequences = 0;  // sequences with at least one valid token

  loss_counts& operator+=(const loss_counts& other) {
    tokens += other.tokens;
    sequences += other.sequences;
    return *this;
  }
  // The normaliser of `mode` from the step's total counts. seq-mean-token-sum-norm also
  // divides by a constant (veRL: the padded response length), so this overload refuses it:
  // use the one that takes the length.
  [[nodiscard]] loss_normalizer normalizer(loss_aggregation mode) const {
    if (mode == loss_aggregation::seq_mean_token_sum_norm)
      detail::fail("mode",
                   "is seq_mean_token_sum_norm, which divides by sequences x the padded "
                   "response length: call normalizer(mode, padded_length)");
    return normalizer(mode, 0.0);  // no scale: no other mode reads it
  }
  // Any mode, with seq-mean-token-sum-norm's constant (read by that mode only).
  [[nodiscard]] loss_normalizer normalizer(loss_aggregation mode, double padded_length) const {
    return {.mode = mode,
            .tokens = static_cast<double>(tokens),
            .sequences = static_cast<double>(sequences),
            .scale = padded_length};
  }
};

}  // namespace cascade_rl
