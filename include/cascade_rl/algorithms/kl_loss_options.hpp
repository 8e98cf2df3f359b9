#pragma once
// The options of kl_loss (kl_estimators.hpp), apart from the algorithms, for the CUDA
// kernels' launch layer; kl_penalty takes terms/kl_token.hpp's kl_options itself.

#include "cascade_rl/terms/aggregation_weight.hpp"
#include "cascade_rl/terms/kl_token.hpp"

namespace cascade_rl {

// A KL term used as a loss (veRL use_kl_loss): coefficient * aggregate(k_t).
struct kl_loss_options {
  kl_options kl{};
  double coefficient = 1.0;
  loss_aggregation aggregation = loss_aggregation::token_mean;
};

}  // namespace cascade_rl
