#pragma once
// Generalized advantage estimation (Schulman et al. 2016), as veRL computes it for PPO
// with a critic (compute_gae_advantage_return in verl/trainer/ppo/core_algos.py):
//
//   backwards over each sequence, on valid tokens only:
//     delta_t = r_t + gamma * V_next - V_t,   A_t = delta_t + gamma * lambda * A_next
//   (V_next, A_next: those of the next valid token, 0 past the last one; a masked token
//   such as a tool observation passes both through);
//   returns_t = A_t + V_t, the critic's target, before whitening;
//   advantages = A whitened over every valid token of the batch (masked_whiten).
//
// Where veRL differs: it does not zero masked tokens. Its advantages there hold the
// whitened carried value ((A_next - mean) * scale, so (0 - mean) * scale on the padding
// after a sequence's last valid token); ours hold 0, as every token-level estimator of
// the library does. Its returns on masked tokens (carried A_next plus that token's
// value) are reproduced, as discounted_returns keeps veRL's masked returns. Valid tokens
// agree. The per-token terms are terms/generalized_advantage.hpp, shared with the CUDA
// kernel and the Thrust path; the whitening is the batch's, so a caller that splits a
// batch must whiten before splitting.

#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>

#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/generalized_advantage.hpp"

namespace cascade_rl {

// The two per-token inputs of GAE, by name (one type: a swap would compile positionally).
template <std::floating_point T>
struct gae_inputs {
  std::span<const T> token_rewards;
  std::span<const T> values;  // the critic's V(s_t) on every token
};

namespace detail {

inline void require_unit_interval(double x, const char* argument) {
  if (!(x >= 0.0 && x <= 1.0)) fail(argument, "must lie in [0, 1], got " + std::to_string(x));
}

inline void require_gae_options(const gae_options& options) {
  require_unit_interval(options.gamma, "options.gamma");
  require_unit_interval(options.lambda, "options.lambda");
  require_whitening_options(options.whitening);
}

}  // namespace detail

// GAE advantages (whitened over the valid tokens, 0 on masked ones) and returns
// (unwhitened advantage + value, on every token). Rewards and values must be finite on
// valid tokens; masked tokens are not read, except their value for their return.
template <exec::host_policy Policy, contiguous_output Out>
void gae_advantages(const Policy& policy, const token_layout& tokens,
                    const gae_inputs<output_value_t<Out>>& inputs, Out&& advantages_out,
                    std::type_identity_t<std::span<output_value_t<Out>>> returns,
                    const gae_options& options = {}) {
  using T = output_value_t<Out>;
  const std::span<T> advantages = output_span(advantages_out);
  detail::require_gae_options(options);
  detail::require_size(inputs.token_rewards.size(), tokens.tokens(), "token_rewards",
                       "one per token");
  detail::require_size(inputs.values.size(), tokens.tokens(), "values", "one per token");
  detail::require_size(advantages.size(), tokens.tokens(), "advantages", "one per token");
  detail::require_size(returns.size(), tokens.tokens(), "returns", "one per token");
  detail::require_finite_where_valid(policy, inputs.token_rewards, tokens, "token_rewards");
  detail::require_finite_where_valid(policy, inputs.values, tokens, "values");
  const double gamma = options.gamma;
  const double gamma_lambda = options.gamma * options.lambda;
  const auto rewards = inputs.token_rewards;
  const auto values = inputs.values;
  detail::for_each_index(
      policy, tokens.sequences(),
      [&](std::size_t s) {
        terms::gae_state state;
        for (std::size_t t = tokens.end(s); t-- > tokens.begin(s);) {
          const bool valid = tokens.valid(t);
          const double value = static_cast<double>(values[t]);
          state = terms::gae_step(valid ? static_cast<double>(rewards[t]) : 0.0, value, valid,
                                  gamma, gamma_lambda, state);
          const T advantage = static_cast<T>(state.advantage);
          advantages[t] = advantage;
          returns[t] = static_cast<T>(static_cast<double>(advantage) + value);
        }
      },
      detail::sequence_parallel_threshold);
  detail::whiten_valid_tokens(policy, std::span<const T>(advantages), tokens, advantages,
                              options.whitening);
}

}  // namespace cascade_rl
