#pragma once
// ReMax (Li et al. 2023), as veRL computes it (compute_remax_outcome_advantage in
// verl/trainer/ppo/core_algos.py): the baseline of a sampled response is the reward of
// the greedy response to the same prompt, computed by the caller.
//
//   returns_t    = sum of the rewards of the valid tokens from t to the end of the sequence
//   advantage_t  = returns_t - baseline_i on the valid tokens of sequence i, 0 elsewhere
//
// No discount, no whitening, no groups. Where veRL differs: its advantage on a masked
// token is returns_t itself (the baseline is multiplied by the mask, the return is not),
// which on a hole inside a sequence (a tool observation) is the rewards after the hole;
// ours is 0 there, as every token-level estimator of the library. Trailing padding gets
// 0 in both, valid tokens agree, and the returns are veRL's on every token.

#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/reward_to_go.hpp"

namespace cascade_rl {

// ReMax's inputs, by name (one type: a swap would compile positionally).
template <std::floating_point T>
struct remax_inputs {
  std::span<const T> token_rewards;     // one per token
  std::span<const T> reward_baselines;  // one per sequence: its greedy response's reward
};

// Advantages (0 on masked tokens) and returns (on every token). Rewards must be finite
// on valid tokens, baselines on every sequence.
template <exec::host_policy Policy, contiguous_output Out>
void remax_advantages(const Policy& policy, const token_layout& tokens,
                      const remax_inputs<output_value_t<Out>>& inputs, Out&& advantages_out,
                      std::type_identity_t<std::span<output_value_t<Out>>> returns,
                      const remax_options& = {}) {
  using T = output_value_t<Out>;
  const std::span<T> advantages = output_span(advantages_out);
  const auto rewards = inputs.token_rewards;
  const auto baselines = inputs.reward_baselines;
  detail::require_size(rewards.size(), tokens.tokens(), "token_rewards", "one per token");
  detail::require_size(baselines.size(), tokens.sequences(), "reward_baselines",
                       "one per sequence");
  detail::require_size(advantages.size(), tokens.tokens(), "advantages", "one per token");
  detail::require_size(returns.size(), tokens.tokens(), "returns", "one per token");
  detail::require_finite_where_valid(policy, rewards, tokens, "token_rewards");
  detail::require_finite(policy, baselines, "reward_baselines");
  detail::for_each_index(
      policy, tokens.sequences(),
      [&](std::size_t s) {
        double run = 0.0;
        for (std::size_t t = tokens.end(s); t-- > tokens.begin(s);) {
          const bool valid = tokens.valid(t);
          run = terms::reward_to_go(valid ? static_cast<double>(rewards[t]) : 0.0, valid, run);
          const T stored = static_cast<T>(run);
          returns[t] = stored;
          advantages[t] = terms::baseline_advantage(stored, baselines[s], valid);
        }
      },
      detail::sequence_parallel_threshold);
}

}  // namespace cascade_rl
