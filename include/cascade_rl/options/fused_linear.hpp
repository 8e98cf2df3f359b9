#pragma once
// How fused_linear_log_probs (algorithms/fused_linear_log_probs.hpp) tiles its work.

#include <cstddef>

namespace cascade_rl {

struct fused_linear_options {
  std::size_t chunk_rows = 32;     // rows of logits held at once, 1 to 32
  std::size_t vocab_tile = 2048;   // columns per matrix-product task
  float temperature = 1.0f;
};

}  // namespace cascade_rl
