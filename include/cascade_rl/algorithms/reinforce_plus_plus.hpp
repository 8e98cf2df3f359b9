#pragma once
// REINFORCE++ (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning
// Large Language Models") and REINFORCE++-baseline, as veRL computes them
// (compute_reinforce_plus_plus_outcome_advantage and
// compute_reinforce_plus_plus_baseline_outcome_advantage in
// verl/trainer/ppo/core_algos.py; masked_whiten in verl/utils/torch_functional.py).
//
//   REINFORCE++:           per-token rewards -> discounted returns -> batch whitening
//   REINFORCE++-baseline:  per-sequence score - group mean -> on every valid token
//                          -> batch whitening
//
// Whitening is global over every valid token of the batch (not per group): the batch
// is the normaliser, so a caller that splits a batch must whiten before splitting.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/discounted_return.hpp"
#include "cascade_rl/terms/group_advantage.hpp"
#include "cascade_rl/terms/whitening.hpp"

namespace cascade_rl {

namespace detail {

inline void require_whitening_options(const whitening_options& options) {
  require_epsilon(options.epsilon, "whitening.epsilon");
  if (options.accumulation == mean_accumulation::float32_sequential)
    fail("whitening.accumulation",
         "float32_sequential is for small groups; a batch mean takes double_precision or "
         "float32_rounded_sum");
}

// Whitens `values` into `out` (which may alias `values`) over the valid tokens;
// masked tokens get 0. `values` must be finite on valid tokens (checked by callers).
template <class Policy, std::floating_point T>
void whiten_valid_tokens(const Policy& policy, std::span<const T> values,
                         const token_layout& tokens, std::span<T> out,
                         const whitening_options& options) {
  const std::size_t n = tokens.tokens();
  const std::size_t count = count_where(policy, n, [&](std::size_t t) { return tokens.valid(t); });
  if (count == 0) {
    for_each_index(policy, n, [&](std::size_t t) { out[t] = T(0); });
    return;
  }
  if (options.estimator == std_estimator::unbiased && count < 2)
    fail("tokens", "has 1 valid token, but whitening with the unbiased variance needs at least 2");
  const double sum = blocked_sum(
      policy, n, [&](std::size_t t) { return tokens.valid(t) ? static_cast<double>(values[t]) : 0.0; });
  const double mean = terms::whitening_mean(sum, count, options.accumulation);
  const auto deviation = [&](std::size_t t) {
    return terms::deviation(values[t], mean, options.accumulation);
  };
  const double squares = blocked_sum(policy, n, [&](std::size_t t) {
    if (!tokens.valid(t)) return 0.0;
    const double d = deviation(t);
    return d * d;
  });
  const double inv_scale =
      terms::whitening_inv_scale(squares, count, options.estimator, options.epsilon);
  for_each_index(policy, n, [&](std::size_t t) {
    out[t] = tokens.valid(t) ? terms::whitened(values[t], mean, inv_scale, options.accumulation,
                                               options.shift_mean)
                             : T(0);
  });
}

}  // namespace detail

// Batch whitening of per-token values over the valid tokens of `tokens`; 0 on masked
// tokens. `whitened` may be the same span as `values`.
template <exec::host_policy Policy, contiguous_output Out>
void masked_whiten(const Policy& policy, const token_layout& tokens,
                   std::span<const output_value_t<Out>> values, Out&& whitened_out,
                   const whitening_options& options = {}) {
  const auto whitened = output_span(whitened_out);
  detail::require_whitening_options(options);
  detail::require_size(values.size(), tokens.tokens(), "values", "one per token");
  detail::require_size(whitened.size(), tokens.tokens(), "whitened", "one per token");
  detail::require_finite_where_valid(policy, values, tokens, "values");
  detail::whiten_valid_tokens(policy, values, tokens, whitened, options);
}

// Discounted return of per-token rewards, backwards within each sequence:
//   ret_t = r_t + gamma * run on valid tokens; a masked token inside a sequence (a tool
// observation) carries run across with return 0 (`masked` carry, veRL since 1dda039) or
// holds r_t + gamma * run and cuts run to 0 (cut, veRL's earlier loop): see
// terms/discounted_return.hpp. Only valid tokens' rewards must be finite.
template <exec::host_policy Policy, contiguous_output Out>
void discounted_returns(const Policy& policy, const token_layout& tokens,
                        std::span<const output_value_t<Out>> token_rewards, Out&& returns_out,
                        double gamma = 1.0,
                        masked_token_return masked = masked_token_return::carry) {
  using T = output_value_t<Out>;
  const std::span<T> returns = output_span(returns_out);
  if (!(gamma >= 0.0 && gamma <= 1.0))
    detail::fail("gamma", "must lie in [0, 1], got " + std::to_string(gamma));
  detail::require_size(token_rewards.size(), tokens.tokens(), "token_rewards", "one per token");
  detail::require_size(returns.size(), tokens.tokens(), "returns", "one per token");
  detail::require_finite_where_valid(policy, token_rewards, tokens, "token_rewards");
  detail::for_each_index(
      policy, tokens.sequences(),
      [&](std::size_t s) {
        double run = 0.0;
        for (std::size_t t = tokens.end(s); t-- > tokens.begin(s);) {
          const terms::return_step step = terms::discounted_return_step(
              static_cast<double>(token_rewards[t]), tokens.valid(t), gamma, run, masked);
          returns[t] = static_cast<T>(step.value);
          run = step.run;
        }
      },
      detail::sequence_parallel_threshold);
}

// REINFORCE++: discounted returns of `token_rewards` (see place_on_last_valid_token
// for outcome rewards), whitened over the batch. Writes the returns into
// `advantages` and whitens them there.
template <exec::host_policy Policy, contiguous_output Out>
void reinforce_plus_plus_advantages(const Policy& policy, const token_layout& tokens,
                                    std::span<const output_value_t<Out>> token_rewards,
                                    Out&& advantages_out,
                                    const reinforce_plus_plus_options& options = {}) {
  using T = output_value_t<Out>;
  const std::span<T> advantages = output_span(advantages_out);
  detail::require_whitening_options(options.whitening);
  detail::require_size(advantages.size(), tokens.tokens(), "advantages", "one per token");
  discounted_returns(policy, tokens, token_rewards, advantages, options.gamma, options.masked);
  detail::whiten_valid_tokens(policy, std::span<const T>(advantages), tokens, advantages,
                              options.whitening);
}

// REINFORCE++-baseline: score_i - mean_g(score) on every valid token of sequence i,
// whitened over the batch. A zero-variance group contributes exact zeros (which the
// whitening then shifts with the rest of the batch).
template <exec::host_policy Policy, contiguous_output Out>
void reinforce_plus_plus_baseline_advantages(
    const Policy& policy, const group_layout& groups, const token_layout& tokens,
    std::span<const output_value_t<Out>> scores, Out&& advantages_out,
    const reinforce_plus_plus_baseline_options& options = {}) {
  using T = output_value_t<Out>;
  const std::span<T> advantages = output_span(advantages_out);
  detail::require_whitening_options(options.whitening);
  detail::require_size(tokens.sequences(), scores.size(), "tokens",
                       "one sequence per score");
  detail::require_size(advantages.size(), tokens.tokens(), "advantages", "one per token");
  groups.require_sequences(scores.size(), "scores");
  if (options.nonfinite == nonfinite_rule::error) detail::require_finite(policy, scores, "scores");
  if (options.singleton == singleton_rule::error)
    detail::refuse_singleton_groups(groups, "REINFORCE++-baseline");

  const terms::group_params params = detail::group_params_of(options);
  detail::for_each_group(
      policy, scores, groups, options.nonfinite,
      [&](std::size_t first, std::size_t last, bool zero_group) {
        const detail::group_moments m =
            detail::moments_to_plan(scores, first, last, zero_group, options.accumulation);
        const terms::group_plan plan = terms::plan_group(m, params);
        for (std::size_t s = first; s < last; ++s) {
          // The sequence's advantage on each of its valid tokens.
          const T value = terms::advantage_of(scores[s], m, plan, params);
          for (std::size_t t = tokens.begin(s); t < tokens.end(s); ++t)
            advantages[t] = tokens.valid(t) ? value : T(0);
        }
      });
  detail::whiten_valid_tokens(policy, std::span<const T>(advantages), tokens, advantages,
                              options.whitening);
}

}  // namespace cascade_rl
