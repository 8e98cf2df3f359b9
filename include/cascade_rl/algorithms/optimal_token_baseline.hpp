#pragma once
// The optimal token baseline (OTB), as veRL computes it (compute_optimal_token_baseline_advantage
// and, with options.multi_turn, compute_multi_turn_optimal_token_baseline_advantage in
// verl/trainer/ppo/core_algos.py): a baseline per token position and group, the group's
// returns weighted by each path's accumulated variance proxy,
//   G_t = the valid rewards of the sequence from t on (the returns, written on every token)
//   w_t = (1 - 2 exp(old_logp_t) + sum_pi_squared_t) * rho_t^2,  W_t = sum_{valid j <= t} w_j
//   B_p = sum_i G_i(p) W_i(p) / (sum_i W_i(p) + epsilon)  over the group's rows i with a
//         valid token at position p
//   A_t = G_t - B_p on valid tokens, 0 on masked ones.
// Positions: single-turn, a token's offset in its sequence (veRL's column); multi-turn, its
// rank among the sequence's valid tokens (veRL compacts each row's valid tokens to the
// left, so tool-observation holes do not shift later turns).
//
// Conventions, veRL's: a group of one gets baseline 0 (advantage = return); in multi-turn,
// sequences without a valid token leave their group (so a group can become one). With
// handle_zero_tail, the group's unique longest sequence (most valid tokens) gets baseline
// 0 from position `second` on, `second` the next-largest count of valid tokens.
// The sums run in double in row order (terms/optimal_token_baseline.hpp), so every
// executor gives the same bits; veRL sums float32 tensors.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/optimal_token_baseline.hpp"

namespace cascade_rl {

// The per-token inputs, by name (one type: a swap would compile positionally).
template <std::floating_point T>
struct optimal_token_baseline_inputs {
  std::span<const T> token_rewards;       // one per token
  std::span<const T> old_log_probs;       // one per token: log pi_old of the sampled token
  std::span<const T> sum_pi_squared;      // one per token: sum over the vocabulary of pi_old^2
  std::span<const T> rollout_is_weights;  // one per token, or empty: none (rho = 1)
};

namespace detail {

inline void require_otb_options(const optimal_token_baseline_options& options) {
  if (!(std::isfinite(options.epsilon) && options.epsilon >= 0.0))
    fail("options.epsilon", "must be finite and >= 0, got " + std::to_string(options.epsilon));
}

}  // namespace detail

// Advantages (0 on masked tokens) and returns (on every token). Inputs must be finite on
// valid tokens.
template <exec::host_policy Policy, contiguous_output Out>
void optimal_token_baseline_advantages(
    const Policy& policy, const group_layout& groups, const token_layout& tokens,
    const optimal_token_baseline_inputs<output_value_t<Out>>& inputs, Out&& advantages_out,
    std::type_identity_t<std::span<output_value_t<Out>>> returns,
    const optimal_token_baseline_options& options = {}) {
  using T = output_value_t<Out>;
  const std::span<T> advantages = output_span(advantages_out);
  const std::size_t n = tokens.tokens();
  detail::require_otb_options(options);
  groups.require_sequences(tokens.sequences(), "tokens");
  detail::require_size(inputs.token_rewards.size(), n, "token_rewards", "one per token");
  detail::require_size(inputs.old_log_probs.size(), n, "old_log_probs", "one per token");
  detail::require_size(inputs.sum_pi_squared.size(), n, "sum_pi_squared", "one per token");
  const bool weighted = !inputs.rollout_is_weights.empty();
  if (weighted)
    detail::require_size(inputs.rollout_is_weights.size(), n, "rollout_is_weights",
                         "one per token, or none");
  detail::require_size(advantages.size(), n, "advantages", "one per token");
  detail::require_size(returns.size(), n, "returns", "one per token");
  detail::require_finite_where_valid(policy, inputs.token_rewards, tokens, "token_rewards");
  detail::require_finite_where_valid(policy, inputs.old_log_probs, tokens, "old_log_probs");
  detail::require_finite_where_valid(policy, inputs.sum_pi_squared, tokens, "sum_pi_squared");
  if (weighted)
    detail::require_finite_where_valid(policy, inputs.rollout_is_weights, tokens,
                                       "rollout_is_weights");

  // Per sequence: returns, cumulative weights W (double), valid-token counts and, in
  // multi-turn, where the sequence's k-th valid token is (at its begin + k); then per
  // group, the baselines (terms/optimal_token_baseline.hpp, every executor's code).
  std::vector<std::int64_t> offsets(tokens.sequences() + 1);
  for (std::size_t s = 0; s <= tokens.sequences(); ++s)
    offsets[s] = static_cast<std::int64_t>(tokens.begin(s));
  const terms::otb_rows rows{offsets.data(), tokens.has_mask() ? tokens.mask().data() : nullptr};
  std::vector<double> cumulative(n, 0.0);
  std::vector<std::size_t> counts(tokens.sequences(), 0);
  std::vector<std::size_t> compacted(options.multi_turn ? n : 0);
  std::size_t* const compacted_at = options.multi_turn ? compacted.data() : nullptr;
  const T* const rho = weighted ? inputs.rollout_is_weights.data() : nullptr;
  detail::for_each_index(
      policy, tokens.sequences(),
      [&](std::size_t s) {
        terms::otb_sequence(rows, s, tokens.begin(s), tokens.end(s), inputs.token_rewards.data(),
                            inputs.old_log_probs.data(), inputs.sum_pi_squared.data(), rho,
                            returns.data(), advantages.data(), cumulative.data(), counts.data(),
                            compacted_at);
      },
      detail::sequence_parallel_threshold);
  detail::for_each_index(policy, groups.groups(), [&](std::size_t g) {
    terms::otb_group(rows, groups.begin(g), groups.end(g), counts.data(), compacted_at,
                     static_cast<const T*>(returns.data()),
                     static_cast<const double*>(cumulative.data()), advantages.data(),
                     options.epsilon, options.handle_zero_tail);
  });
}

}  // namespace cascade_rl
