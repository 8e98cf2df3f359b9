#pragma once
// ReMax on the portable path: the host's reward-to-go per sequence
// (terms/reward_to_go.hpp).

#include "cascade_rl/algorithms/remax_advantages.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/terms/reward_to_go.hpp"

namespace cascade_rl::cuda::portable::detail {

// ReMax, one sequence (for_each_sequence): the host's reward-to-go
// (terms/reward_to_go.hpp).
template <class T>
struct remax_rule {
  const T* rewards;
  const T* baselines;
  T* advantages;
  T* returns;
  CASCADE_RL_HD void operator()(const device_token_layout& layout, std::size_t s) const {
    double run = 0.0;
    for (std::size_t t = layout.end(s); t-- > layout.begin(s);) {
      const bool valid = layout.valid(t);
      run = terms::reward_to_go(valid ? static_cast<double>(rewards[t]) : 0.0, valid, run);
      const T stored = static_cast<T>(run);
      returns[t] = stored;
      advantages[t] = terms::baseline_advantage(stored, baselines[s], valid);
    }
  }
};

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

// Advantages (return - baseline on valid tokens, 0 on masked ones) and returns (the
// reward-to-go over the valid tokens, on every token); reward_baselines: one per sequence.
template <class ExecPolicy, class T>
void remax_advantages(ExecPolicy&& exec, const T* token_rewards, const T* reward_baselines,
                      const device_token_layout& layout, T* advantages, T* returns,
                      const remax_options& = {}) {
  detail::for_each_sequence(
      exec, layout, detail::remax_rule<T>{token_rewards, reward_baselines, advantages, returns});
}

}  // namespace cascade_rl::cuda::portable
