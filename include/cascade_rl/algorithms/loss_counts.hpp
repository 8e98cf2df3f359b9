#pragma once
// What local_loss_counts (loss_aggregation.hpp) returns, apart from the algorithm, for
// the CUDA kernels' launch layer.

#include <cstddef>

#include "cascade_rl/core/error.hpp"
#include "cascade_rl/terms/aggregation_weight.hpp"

namespace cascade_rl {

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
