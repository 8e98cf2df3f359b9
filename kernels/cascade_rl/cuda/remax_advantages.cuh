#pragma once
// ReMax (remax_advantages.hpp of the host core) on the device: a thread per sequence runs
// the host's reward-to-go (terms/reward_to_go.hpp); the host's bits.
//
// Three layers, one file each: kernel/remax_advantages.cuh (the kernel),
// device/remax_advantages.cuh (CUB's shape: temporary storage, cudaError_t, the stream
// last) and this file, the throwing convenience overload of the host algorithm.

#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/remax_advantages.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/remax_advantages.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl {

// Spans point to device memory; the call waits for its stream.
template <std::floating_point T>
void remax_advantages(exec::cuda_policy policy, const cuda::device_token_layout& tokens,
                      const remax_inputs<T>& inputs, std::span<T> advantages, std::span<T> returns,
                      const remax_options& = {}) {
  detail::require_size(inputs.token_rewards.size(), tokens.tokens, "token_rewards",
                       "one per token");
  detail::require_size(inputs.reward_baselines.size(), tokens.sequences, "reward_baselines",
                       "one per sequence");
  detail::require_size(advantages.size(), tokens.tokens, "advantages", "one per token");
  detail::require_size(returns.size(), tokens.tokens, "returns", "one per token");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::remax_advantages(temp, bytes, inputs.token_rewards.data(),
                                      inputs.reward_baselines.data(), tokens, advantages.data(),
                                      returns.data(), policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"token_rewards", "reward_baselines"});
}

}  // namespace cascade_rl
