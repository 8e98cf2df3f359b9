#pragma once
// The optimal token baseline (algorithms/optimal_token_baseline.hpp) on the portable
// path.

#include "cascade_rl/algorithms/optimal_token_baseline.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/terms/optimal_token_baseline.hpp"

namespace cascade_rl::cuda::portable {
namespace detail {

// One sequence (for_each_sequence): returns, W, the valid count, the ranks' tokens
// (terms::otb_sequence).
template <class T>
struct otb_sequence_rule {
  const T *rewards, *old_log_probs, *sum_pi_squared, *rho;
  T *advantages, *returns;
  double* cumulative;
  std::size_t *counts, *compacted;
  CASCADE_RL_HD void operator()(const device_token_layout& layout, std::size_t s) const {
    terms::otb_sequence(terms::otb_rows{layout.offsets, layout.mask}, s, layout.begin(s),
                        layout.end(s), rewards, old_log_probs, sum_pi_squared, rho, returns,
                        advantages, cumulative, counts, compacted);
  }
};

// One group: the baselines position by position (terms::otb_group).
template <class T>
struct otb_group_functor {
  device_group_layout groups;
  device_token_layout layout;
  const std::size_t *counts, *compacted;
  const T* returns;
  const double* cumulative;
  T* advantages;
  double epsilon;
  bool handle_zero_tail;
  CASCADE_RL_HD void operator()(std::size_t g) const {
    terms::otb_group(terms::otb_rows{layout.offsets, layout.mask}, groups.begin(g), groups.end(g),
                     counts, compacted, returns, cumulative, advantages, epsilon, handle_zero_tail);
  }
};

}  // namespace detail

// Advantages (0 on masked tokens) and returns (every token); rollout_is_weights null: none.
// Scratch: cumulative one double per token, counts one per sequence, positions one per
// token under options.multi_turn (else unused, may be null). Inputs are not validated.
template <class ExecPolicy, class T>
void optimal_token_baseline_advantages(ExecPolicy&& exec, const T* token_rewards,
                                       const T* old_log_probs, const T* sum_pi_squared,
                                       const T* rollout_is_weights,
                                       const device_group_layout& groups,
                                       const device_token_layout& layout, T* advantages, T* returns,
                                       const optimal_token_baseline_options& options,
                                       double* cumulative, std::size_t* counts,
                                       std::size_t* positions) {
  std::size_t* const compacted = options.multi_turn ? positions : nullptr;
  detail::for_each_sequence(exec, layout,
                            detail::otb_sequence_rule<T>{token_rewards, old_log_probs,
                                                         sum_pi_squared, rollout_is_weights,
                                                         advantages, returns, cumulative, counts,
                                                         compacted});
  detail::for_each_index(
      exec, groups.groups,
      detail::otb_group_functor<T>{groups, layout, counts, compacted, returns, cumulative,
                                   advantages, options.epsilon, options.handle_zero_tail});
}

}  // namespace cascade_rl::cuda::portable
