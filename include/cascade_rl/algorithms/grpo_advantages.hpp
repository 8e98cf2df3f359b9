#pragma once
// GRPO outcome advantages (Shao et al. 2024, DeepSeekMath), per sequence:
//   A_i = (r_i - mean_g(r)) / (std_g(r) + eps)
// and Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"), which drops
// the std scaling because it up-weights near-constant groups:
//   A_i = r_i - mean_g(r)                      (options.scale_by_std = false)
// veRL: compute_grpo_outcome_advantage in verl/trainer/ppo/core_algos.py
// (norm_adv_by_std_in_grpo selects between the two).
//
// The output is per sequence; broadcast_to_tokens (broadcast.hpp) puts it on tokens.
// A zero-variance group (max == min, exactly) gets exactly 0: with eps = 0 the formula
// would be 0/0, and with a float32 mean it could be a rounding residue over eps.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/algorithms/uniform_group_tiles.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/group_advantage.hpp"

namespace cascade_rl {

template <exec::host_policy Policy, contiguous_output Out>
void grpo_advantages(const Policy& policy, const group_layout& groups,
                     std::span<const output_value_t<Out>> rewards, Out&& advantages_out,
                     const grpo_options& options = {}) {
  const auto advantages = output_span(advantages_out);
  detail::require_epsilon(options.epsilon, "epsilon");
  const terms::group_params params = detail::group_params_of(options);
  const bool refuse_singletons = params.refuse_singletons;
  const auto group = [&](std::size_t first, std::size_t last, bool zero_group) {
    detail::advantages_of_group(rewards, first, last, zero_group, params, advantages);
  };

  if (detail::single_pass_applies(rewards, groups, advantages.size(), options.nonfinite,
                                  refuse_singletons) &&
      detail::advantages_of_finite_groups(policy, groups, rewards, advantages, params,
                                          options.accumulation, group))
    return;
  // A NaN or infinite reward: the checks below name it.
  detail::validate_group_advantage_inputs(policy, rewards, groups, advantages.size(),
                                          options.nonfinite, refuse_singletons,
                                          "GRPO with the unbiased std");
  detail::for_each_group(policy, rewards, groups, options.nonfinite, group);
}

}  // namespace cascade_rl
