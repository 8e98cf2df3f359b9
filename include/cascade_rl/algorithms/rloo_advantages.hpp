#pragma once
// RLOO outcome advantages (Kool et al. 2019, "Buy 4 REINFORCE samples, get a baseline
// for free!"; Ahmadian et al. 2024, "Back to Basics"): each sequence's baseline is the
// mean reward of the other sequences of its group,
//   A_i = r_i - (sum_j r_j - r_i) / (n - 1) = n / (n - 1) * (r_i - mean_g(r)).
// veRL: compute_rloo_outcome_advantage in verl/trainer/ppo/core_algos.py, which
// writes it as r_i * n/(n-1) - mean * n/(n-1) and keeps the raw score for a group
// of one. We use the second form: one rounding fewer, and exact 0 for equal rewards.

#include <concepts>
#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/algorithms/uniform_group_tiles.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/group_advantage.hpp"

namespace cascade_rl {

template <exec::host_policy Policy, contiguous_output Out>
void rloo_advantages(const Policy& policy, const group_layout& groups,
                     std::span<const output_value_t<Out>> rewards, Out&& advantages_out,
                     const rloo_options& options = {}) {
  const auto advantages = output_span(advantages_out);
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
  detail::validate_group_advantage_inputs(policy, rewards, groups, advantages.size(),
                                          options.nonfinite, refuse_singletons, "RLOO");
  detail::for_each_group(policy, rewards, groups, options.nonfinite, group);
}

}  // namespace cascade_rl
