#pragma once
// REINFORCE++ and REINFORCE++-baseline (reinforce_plus_plus.hpp of the host core), and
// their two building blocks:
//   discounted_returns:  one thread per sequence runs the host's backward recurrence
//                        ret_t = r_t + gamma * run (a masked token carrying run across
//                        or cutting it), in the host's order (the host's bits);
//   masked_whiten:       batch whitening over the valid tokens: count and sum per block
//                        of the canonical sum order, joined in block order into the mean;
//                        squared deviations likewise into the scale; then the elementwise
//                        map. Five launches, the values read three times.
// REINFORCE++-baseline runs the group kernel of group_advantages.cuh (score - group
// mean, RLOO's plan with factor 1) into a per-sequence buffer, broadcasts it onto the
// valid tokens and whitens. No floating-point atomics: the same bits on every run; the
// whitening sums follow the host's canonical order (its bits wherever the inputs are the
// host's).
//
// Three layers, one file each: kernel/reinforce_plus_plus.cuh (the kernels),
// device/reinforce_plus_plus.cuh (CUB's shape: temporary storage, cudaError_t, the
// stream last) and this file, the throwing convenience overloads of the host algorithms.

#include <cstddef>
#include <span>
#include <string>

#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/reinforce_plus_plus.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl::cuda::detail {

// After throw_if_reported: the whitening's own refusal, in the host core's words.
inline void throw_if_whitening_refused(const device_report& r) {
  if (r.first_refused != device_report::none)
    cascade_rl::detail::fail("tokens",
                             "has 1 valid token, but whitening with the unbiased variance needs at least 2");
}

inline void require_gamma(double gamma) {
  if (!usable_gamma(gamma))
    cascade_rl::detail::fail("gamma", "must lie in [0, 1], got " + std::to_string(gamma));
}

}  // namespace cascade_rl::cuda::detail

// ---- the throwing convenience layer -----------------------------------------------------
// Spans point to device memory; each call waits for its stream.

namespace cascade_rl {

// Batch whitening of per-token values over the valid tokens; 0 on masked tokens.
// `whitened` may be the same span as `values`.
template <std::floating_point T>
void masked_whiten(exec::cuda_policy policy, const cuda::device_token_layout& tokens,
                   std::span<const T> values, std::span<T> whitened,
                   const whitening_options& options = {}) {
  detail::require_whitening_options(options);
  detail::require_size(values.size(), tokens.tokens, "values", "one per token");
  detail::require_size(whitened.size(), tokens.tokens, "whitened", "one per token");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::masked_whiten(temp, bytes, values.data(), tokens, whitened.data(), options,
                                   policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"values"});
  cuda::detail::throw_if_whitening_refused(report);
}

template <std::floating_point T>
void discounted_returns(exec::cuda_policy policy, const cuda::device_token_layout& tokens,
                        std::span<const T> token_rewards, std::span<T> returns, double gamma = 1.0,
                        masked_token_return masked = masked_token_return::carry) {
  cuda::detail::require_gamma(gamma);
  detail::require_size(token_rewards.size(), tokens.tokens, "token_rewards", "one per token");
  detail::require_size(returns.size(), tokens.tokens, "returns", "one per token");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::discounted_returns(temp, bytes, token_rewards.data(), tokens, returns.data(),
                                        gamma, masked, policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"token_rewards"});
}

template <std::floating_point T>
void reinforce_plus_plus_advantages(exec::cuda_policy policy,
                                    const cuda::device_token_layout& tokens,
                                    std::span<const T> token_rewards, std::span<T> advantages,
                                    const reinforce_plus_plus_options& options = {}) {
  detail::require_whitening_options(options.whitening);
  detail::require_size(advantages.size(), tokens.tokens, "advantages", "one per token");
  cuda::detail::require_gamma(options.gamma);
  detail::require_size(token_rewards.size(), tokens.tokens, "token_rewards", "one per token");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::reinforce_plus_plus_advantages(temp, bytes, token_rewards.data(), tokens,
                                                    advantages.data(), options, policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"token_rewards"});
  cuda::detail::throw_if_whitening_refused(report);
}

template <std::floating_point T>
void reinforce_plus_plus_baseline_advantages(
    exec::cuda_policy policy, const cuda::device_group_layout& groups,
    const cuda::device_token_layout& tokens, std::span<const T> scores, std::span<T> advantages,
    const reinforce_plus_plus_baseline_options& options = {}) {
  detail::require_whitening_options(options.whitening);
  detail::require_size(tokens.sequences, scores.size(), "tokens", "one sequence per score");
  detail::require_size(advantages.size(), tokens.tokens, "advantages", "one per token");
  groups.require_sequences(scores.size(), "scores");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::reinforce_plus_plus_baseline_advantages(temp, bytes, scores.data(), groups,
                                                             tokens, advantages.data(), options,
                                                             policy.stream);
      });
  cuda::detail::throw_if_reported(
      report, {"scores"},
      "is a group of one sequence, but REINFORCE++-baseline needs at least 2 (set "
      "options.singleton to accept it)");
  cuda::detail::throw_if_whitening_refused(report);
}

}  // namespace cascade_rl
