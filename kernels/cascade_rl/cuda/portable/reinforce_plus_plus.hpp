#pragma once
// Discounted returns, REINFORCE++ and REINFORCE++-baseline on the portable path: a work
// item per sequence (returns) or per group (the baseline), then the batch whitening.

#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/cuda/portable/whitening.hpp"

namespace cascade_rl::cuda::portable::detail {

// Discounted returns, one sequence (for_each_sequence): the host's backward recurrence
// (terms::discounted_return_step).
template <class T>
struct returns_rule {
  const T* rewards;
  T* returns;
  double gamma;
  masked_token_return masked;
  CASCADE_RL_HD void operator()(const device_token_layout& layout, std::size_t s) const {
    double run = 0.0;
    for (std::size_t t = layout.end(s); t-- > layout.begin(s);) {
      const terms::return_step step = terms::discounted_return_step(
          static_cast<double>(rewards[t]), layout.valid(t), gamma, run, masked);
      returns[t] = static_cast<T>(step.value);
      run = step.run;
    }
  }
};

// REINFORCE++-baseline, one group (for_each_group): score - mean on the valid tokens of
// its sequences.
template <class T>
struct baseline_rule {
  device_token_layout layout;
  T* advantages;
  group_params p;
  CASCADE_RL_HD void operator()(const scored_group<T>& group) const {
    const group_moments m = group.moments(p.accumulation);
    const group_plan plan = plan_group(m, p);
    for (std::size_t s = group.first; s < group.last; ++s)
      fill_valid_tokens(layout, s, advantage_of(group.scores[s], m, plan, p), advantages);
  }
};

inline void require_gamma(double gamma) {
  if (!(gamma >= 0.0 && gamma <= 1.0))
    cascade_rl::detail::fail("gamma", "must lie in [0, 1], got " + std::to_string(gamma));
}

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

template <class ExecPolicy, class T>
void discounted_returns(ExecPolicy&& exec, const T* token_rewards,
                        const device_token_layout& layout, T* returns, double gamma = 1.0,
                        masked_token_return masked = masked_token_return::carry) {
  detail::require_gamma(gamma);
  detail::for_each_sequence(exec, layout,
                            detail::returns_rule<T>{token_rewards, returns, gamma, masked});
}

// Discounted returns written to advantages, whitened there.
template <class ExecPolicy, class T>
void reinforce_plus_plus_advantages(ExecPolicy&& exec, const T* token_rewards,
                                    const device_token_layout& layout, T* advantages,
                                    const reinforce_plus_plus_options& options, double* scratch) {
  cascade_rl::detail::require_whitening_options(options.whitening);
  portable::discounted_returns(exec, token_rewards, layout, advantages, options.gamma,
                               options.masked);
  detail::whiten(exec, static_cast<const T*>(advantages), layout, advantages, options.whitening, scratch);
}

// score_i - mean_g(score) on the valid tokens of sequence i, whitened over the batch.
template <class ExecPolicy, class T>
void reinforce_plus_plus_baseline_advantages(ExecPolicy&& exec, const T* scores,
                                             const device_group_layout& groups,
                                             const device_token_layout& layout, T* advantages,
                                             const reinforce_plus_plus_baseline_options& options,
                                             double* scratch) {
  cascade_rl::detail::require_whitening_options(options.whitening);
  detail::for_each_group(
      exec, scores, groups,
      detail::baseline_rule<T>{layout, advantages, detail::group_params_of(options)});
  detail::whiten(exec, static_cast<const T*>(advantages), layout, advantages, options.whitening, scratch);
}

}  // namespace cascade_rl::cuda::portable
