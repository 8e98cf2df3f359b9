#pragma once
// GRPO pass@k outcome advantages (Chen et al. 2025), as veRL computes them
// (compute_grpo_passk_outcome_advantage in verl/trainer/ppo/core_algos.py), per sequence:
// the best response of each group gets (r_max - r_second) / (std_g(r) + eps) (or the gap
// alone, scale_by_std = false), every other response 0. A group whose maximum is tied
// (a constant group included) gets 0 everywhere. The output is per sequence, as
// GRPO's; broadcast_to_tokens puts it on tokens.
//
// veRL reads norm_adv_by_std_in_grpo from the algorithm config, not from its keyword
// argument, and refuses groups of one (there is no second reward); so does the default
// here (singleton_rule::zero_advantage gives them 0 instead). Terms:
// terms/passk_advantage.hpp.

#include <concepts>
#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/passk_advantage.hpp"

namespace cascade_rl {

namespace detail {

inline void require_passk_options(const grpo_passk_options& options) {
  require_epsilon(options.epsilon, "options.epsilon");
  if (options.singleton == singleton_rule::raw_score)
    fail("options.singleton",
         "raw_score has no meaning for pass@k (a group of one has no second reward); take "
         "error or zero_advantage");
  if (options.accumulation == mean_accumulation::float32_rounded_sum)
    fail("options.accumulation",
         "float32_rounded_sum is for batch means; a group mean takes double_precision or "
         "float32_sequential");
}

}  // namespace detail

template <exec::host_policy Policy, contiguous_output Out>
void grpo_passk_advantages(const Policy& policy, const group_layout& groups,
                           std::span<const output_value_t<Out>> scores, Out&& advantages_out,
                           const grpo_passk_options& options = {}) {
  using T = output_value_t<Out>;
  const std::span<T> advantages = output_span(advantages_out);
  detail::require_passk_options(options);
  groups.require_sequences(scores.size(), "scores");
  detail::require_size(advantages.size(), scores.size(), "advantages", "one per score");
  if (options.nonfinite == nonfinite_rule::error) detail::require_finite(policy, scores, "scores");
  if (options.singleton == singleton_rule::error)
    detail::refuse_singleton_groups(groups, "GRPO pass@k");
  detail::for_each_group(policy, scores, groups, options.nonfinite,
                         [&](std::size_t first, std::size_t last, bool zero_group) {
                           terms::passk_group(scores.data(), first, last, zero_group, options,
                                              advantages.data());
                         });
}

}  // namespace cascade_rl
