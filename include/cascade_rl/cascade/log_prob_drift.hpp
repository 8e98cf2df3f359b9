#pragma once
// The drift between the sampler and the trainer: the largest |trainer - sampler|
// log-prob over the tokens the loss reads (the actions of an episode, every token of a
// single-turn response). Strictly on-policy training assumes it is 0; a chat template
// that re-tokenised a turn differently, or a sampler and trainer that disagree
// numerically, show here first. Reported whenever a stage has both log-probs.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

#include "cascade_rl/cascade/rollout_batch.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

[[nodiscard]] inline double log_prob_drift(const rollout_batch& batch,
                                           std::span<const float> trainer_log_probs) {
  detail::require_size(trainer_log_probs.size(), batch.token_count(), "trainer_log_probs",
                       "one per token of the batch");
  double drift = 0.0;
  for (std::size_t t = 0; t < batch.token_count(); ++t) {
    if (!batch.loss_mask.empty() && batch.loss_mask[t] == 0) continue;
    const double d = std::abs(static_cast<double>(trainer_log_probs[t]) -
                              static_cast<double>(batch.behaviour_log_probs[t]));
    if (!(d <= drift)) drift = d;  // a NaN is kept: it must show
  }
  return drift;
}

}  // namespace cascade_rl
