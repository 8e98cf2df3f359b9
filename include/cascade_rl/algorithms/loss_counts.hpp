#pragma once
// What local_loss_counts (loss_aggregation.hpp) returns, apart from the algorithm, for
// the CUDA kernels' launch layer.

#include <cstddef>

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
  [[nodiscard]] loss_normalizer normalizer(double scale = 1) const {
    return {static_cast<double>(tokens), static_cast<double>(sequences), scale};
  }
};

}  // namespace cascade_rl
