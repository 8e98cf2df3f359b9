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

#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>

#include "cascade_rl/algorithms/advantage_options.hpp"
#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"

namespace cascade_rl {

struct grpo_options {
  bool scale_by_std = true;  // false: Dr. GRPO
  double epsilon = 1e-6;
  epsilon_placement epsilon_at = epsilon_placement::added_to_std;
  std_estimator estimator = std_estimator::unbiased;
  // Applies to groups of one when the estimator needs two (scale_by_std with the
  // unbiased std). Otherwise a group of one is a zero-variance group and gets 0,
  // except under raw_score, which always reproduces veRL's mean 0 / std 1.
  singleton_rule singleton = singleton_rule::error;
  nonfinite_rule nonfinite = nonfinite_rule::error;
  mean_accumulation accumulation = mean_accumulation::double_precision;
};

template <exec::host_policy Policy, std::floating_point T>
void grpo_advantages(const Policy& policy, std::span<const T> rewards, const group_layout& groups,
                     std::span<T> advantages, const grpo_options& options = {}) {
  detail::require_epsilon(options.epsilon, "epsilon");
  const bool needs_two = options.scale_by_std && options.estimator == std_estimator::unbiased;
  const bool refuse_singletons = needs_two && options.singleton == singleton_rule::error;

  // The divisor for a given std, with eps where the options put it.
  const auto scale = [&](double std) {
    return options.epsilon_at == epsilon_placement::added_to_std
               ? std + options.epsilon
               : std::sqrt(std * std + options.epsilon);
  };

  const auto group = [&](std::size_t first, std::size_t last, bool zero_group) {
    const bool singleton = last - first == 1;
    if (zero_group || (singleton && options.singleton == singleton_rule::zero_advantage)) {
      for (std::size_t i = first; i < last; ++i) advantages[i] = T(0);
      return;
    }
    if (singleton && options.singleton == singleton_rule::raw_score) {
      // veRL: mean 0, std 1.
      const double r = static_cast<double>(rewards[first]);
      advantages[first] = static_cast<T>(options.scale_by_std ? r / scale(1.0) : r);
      return;
    }
    const detail::group_moments m =
        detail::group_moments_of(rewards, first, last, options.accumulation);
    if (m.zero_variance) {
      for (std::size_t i = first; i < last; ++i) advantages[i] = T(0);
      return;
    }
    const double divisor =
        options.scale_by_std ? scale(detail::group_std(m, options.estimator)) : 1.0;
    for (std::size_t i = first; i < last; ++i)
      advantages[i] =
          static_cast<T>(detail::deviation(rewards[i], m.mean, options.accumulation) / divisor);
  };

  if (detail::single_pass_applies(rewards, groups, advantages.size(), options.nonfinite,
                                  refuse_singletons) &&
      detail::for_each_finite_group(policy, rewards, groups, group))
    return;
  detail::validate_group_advantage_inputs(policy, rewards, groups, advantages.size(),
                                          options.nonfinite, refuse_singletons,
                                          "GRPO with the unbiased std");
  detail::for_each_group(policy, rewards, groups, options.nonfinite, group);
}

}  // namespace cascade_rl
