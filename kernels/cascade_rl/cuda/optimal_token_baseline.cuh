#pragma once
// The optimal token baseline (optimal_token_baseline.hpp of the host core) on the device: a
// thread per sequence, then a thread per group, running the host's terms
// (terms/optimal_token_baseline.hpp) in the host's order; the host's bits.
//
// Three layers, one file each: kernel/optimal_token_baseline.cuh (the kernels),
// device/optimal_token_baseline.cuh (CUB's shape: temporary storage, cudaError_t, the stream
// last) and this file, the throwing convenience overload of the host algorithm.

#include <cstddef>
#include <span>
#include <string>

#include "cascade_rl/algorithms/optimal_token_baseline.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/optimal_token_baseline.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl {

// Spans point to device memory; the call waits for its stream.
template <std::floating_point T>
void optimal_token_baseline_advantages(exec::cuda_policy policy,
                                       const cuda::device_group_layout& groups,
                                       const cuda::device_token_layout& tokens,
                                       const optimal_token_baseline_inputs<T>& inputs,
                                       std::span<T> advantages, std::span<T> returns,
                                       const optimal_token_baseline_options& options = {}) {
  const std::size_t n = tokens.tokens;
  detail::require_otb_options(options);
  groups.require_sequences(tokens.sequences, "tokens");
  detail::require_size(inputs.token_rewards.size(), n, "token_rewards", "one per token");
  detail::require_size(inputs.old_log_probs.size(), n, "old_log_probs", "one per token");
  detail::require_size(inputs.sum_pi_squared.size(), n, "sum_pi_squared", "one per token");
  const bool weighted = !inputs.rollout_is_weights.empty();
  if (weighted)
    detail::require_size(inputs.rollout_is_weights.size(), n, "rollout_is_weights",
                         "one per token, or none");
  detail::require_size(advantages.size(), n, "advantages", "one per token");
  detail::require_size(returns.size(), n, "returns", "one per token");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::optimal_token_baseline_advantages(
            temp, bytes, inputs.token_rewards.data(), inputs.old_log_probs.data(),
            inputs.sum_pi_squared.data(), weighted ? inputs.rollout_is_weights.data() : nullptr,
            groups, tokens, advantages.data(), returns.data(), options, policy.stream);
      });
  cuda::detail::throw_if_reported(
      report, {"token_rewards", "old_log_probs", "sum_pi_squared", "rollout_is_weights"});
}

}  // namespace cascade_rl
