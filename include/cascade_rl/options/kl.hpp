#pragma once
// The KL estimators' options (terms/kl_token.hpp: k1, abs, k2, k3 and their clamps) and a
// KL term used as a loss (kl_loss in algorithms/kl_estimators.hpp, veRL use_kl_loss).

#include "cascade_rl/options/loss_normalizer.hpp"

namespace cascade_rl {

enum class kl_estimator { k1, abs, k2, k3 };

struct kl_options {
  kl_estimator estimator = kl_estimator::k3;
  double input_clamp = 20.0;   // k3 only: x = ref - logp clamped to +-input_clamp
  double output_clamp = 10.0;  // k3 only: the estimate clamped to +-output_clamp
  // The estimator's value with k2's gradient logp - ref (veRL's "+" suffix).
  bool straight_through = false;
};

// A KL term used as a loss (veRL use_kl_loss): coefficient * aggregate(k_t).
struct kl_loss_options {
  kl_options kl{};
  double coefficient = 1.0;
  loss_aggregation aggregation = loss_aggregation::token_mean;
};

}  // namespace cascade_rl
