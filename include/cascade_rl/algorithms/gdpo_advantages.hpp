#pragma once
// GDPO (group reward-decoupled normalisation for multi-component rewards), as veRL
// computes it (compute_gdpo_outcome_advantage in verl/trainer/ppo/core_algos.py): each
// reward component is normalised within its groups on its own (GRPO, grpo_advantages.hpp),
// the normalised components are summed with weights, the sum goes on every valid token
// of its sequence and is whitened over the batch (masked_whiten):
//   A_i = whiten( sum_k w_k * grpo_k(i) )
// so a component with a small spread is not drowned by one with a large spread, as it
// would be if the components were summed before normalising.
//
// Components come component-major: component k's scores are
// component_scores[k N, (k + 1) N) for N sequences. The weighted sum is taken in double,
// components in order (terms/weighted_components.hpp), and rounded to T once before
// the whitening. Masked tokens get 0 (veRL multiplies by the mask too).

#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/weighted_components.hpp"

namespace cascade_rl {

// The reward components of every sequence and their weights, by name.
template <std::floating_point T>
struct gdpo_inputs {
  std::span<const T> component_scores;  // components x sequences, component-major
  std::span<const double> weights;      // one per component (veRL's gdpo_reward_weights)
};

namespace detail {

inline void require_gdpo_weights(std::span<const double> weights) {
  if (weights.empty()) fail("weights", "is empty, but GDPO needs one weight per component");
  for (std::size_t k = 0; k < weights.size(); ++k)
    if (!std::isfinite(weights[k])) fail_at("weights", k, "is not finite");
}

}  // namespace detail

template <exec::host_policy Policy, contiguous_output Out>
void gdpo_advantages(const Policy& policy, const group_layout& groups, const token_layout& tokens,
                     const gdpo_inputs<output_value_t<Out>>& inputs, Out&& advantages_out,
                     const gdpo_options& options = {}) {
  using T = output_value_t<Out>;
  const std::span<T> advantages = output_span(advantages_out);
  detail::require_epsilon(options.grpo.epsilon, "options.grpo.epsilon");
  detail::require_whitening_options(options.whitening);
  detail::require_gdpo_weights(inputs.weights);
  const std::size_t n = tokens.sequences();
  const std::size_t components = inputs.weights.size();
  groups.require_sequences(n, "tokens");
  detail::require_size(inputs.component_scores.size(), components * n, "component_scores",
                       "one per sequence and component");
  detail::require_size(advantages.size(), tokens.tokens(), "advantages", "one per token");
  if (options.grpo.nonfinite == nonfinite_rule::error)
    detail::require_finite(policy, inputs.component_scores, "component_scores");
  std::vector<T> component(n);
  std::vector<double> sum(n, 0.0);
  for (std::size_t k = 0; k < components; ++k) {
    grpo_advantages(policy, groups, inputs.component_scores.subspan(k * n, n),
                    std::span<T>(component), options.grpo);
    const double w = inputs.weights[k];
    detail::for_each_index(policy, n, [&](std::size_t s) {
      sum[s] = terms::add_weighted_component(sum[s], w, static_cast<double>(component[s]));
    });
  }
  detail::for_each_index(policy, n, [&](std::size_t s) { component[s] = static_cast<T>(sum[s]); });
  broadcast_to_tokens(policy, tokens, std::span<const T>(component), advantages);
  detail::whiten_valid_tokens(policy, std::span<const T>(advantages), tokens, advantages,
                              options.whitening);
}

}  // namespace cascade_rl
