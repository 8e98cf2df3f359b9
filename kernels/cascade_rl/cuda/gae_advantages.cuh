#pragma once
// GAE (gae_advantages.hpp of the host core) on the device: a thread per sequence runs the
// host's backward recurrence (terms/generalized_advantage.hpp) into the advantages and
// returns, then the batch whitening of reinforce_plus_plus.cuh whitens the advantages in
// place. No floating-point atomics; the host's bits.
//
// Three layers, one file each: kernel/gae_advantages.cuh (the kernel),
// device/gae_advantages.cuh (CUB's shape: temporary storage, cudaError_t, the stream
// last) and this file, the throwing convenience overload of the host algorithm.

#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/gae_advantages.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/gae_advantages.cuh"
#include "cascade_rl/cuda/policy.hpp"
#include "cascade_rl/cuda/reinforce_plus_plus.cuh"

namespace cascade_rl {

// Spans point to device memory; the call waits for its stream.
template <std::floating_point T>
void gae_advantages(exec::cuda_policy policy, const cuda::device_token_layout& tokens,
                    const gae_inputs<T>& inputs, std::span<T> advantages, std::span<T> returns,
                    const gae_options& options = {}) {
  detail::require_gae_options(options);
  detail::require_size(inputs.token_rewards.size(), tokens.tokens, "token_rewards",
                       "one per token");
  detail::require_size(inputs.values.size(), tokens.tokens, "values", "one per token");
  detail::require_size(advantages.size(), tokens.tokens, "advantages", "one per token");
  detail::require_size(returns.size(), tokens.tokens, "returns", "one per token");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::gae_advantages(temp, bytes, inputs.token_rewards.data(), inputs.values.data(),
                                    tokens, advantages.data(), returns.data(), options,
                                    policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"token_rewards", "values"});
  cuda::detail::throw_if_whitening_refused(report);
}

}  // namespace cascade_rl
