#pragma once
// GDPO (gdpo_advantages.hpp of the host core) on the device: per component the group
// kernel of group_advantages.cuh (GRPO), a thread per sequence adding it with its weight
// in component order, then the broadcast and the whitening of reinforce_plus_plus.cuh;
// the host's bits.
//
// Three layers, one file each: kernel/gdpo_advantages.cuh (the kernels),
// device/gdpo_advantages.cuh (CUB's shape: temporary storage, cudaError_t, the stream
// last) and this file, the throwing convenience overload of the host algorithm.

#include <cstddef>
#include <span>
#include <string>

#include "cascade_rl/algorithms/gdpo_advantages.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/gdpo_advantages.cuh"
#include "cascade_rl/cuda/policy.hpp"
#include "cascade_rl/cuda/reinforce_plus_plus.cuh"

namespace cascade_rl {

// component_scores point to device memory, weights to host memory; the call waits for
// its stream.
template <std::floating_point T>
void gdpo_advantages(exec::cuda_policy policy, const cuda::device_group_layout& groups,
                     const cuda::device_token_layout& tokens, const gdpo_inputs<T>& inputs,
                     std::span<T> advantages, const gdpo_options& options = {}) {
  detail::require_epsilon(options.grpo.epsilon, "options.grpo.epsilon");
  detail::require_whitening_options(options.whitening);
  detail::require_gdpo_weights(inputs.weights);
  const std::size_t n = tokens.sequences;
  if (n != groups.sequences)
    detail::fail("tokens", "has " + std::to_string(n) + " sequences, but the groups hold " +
                               std::to_string(groups.sequences));
  detail::require_size(inputs.component_scores.size(), inputs.weights.size() * n,
                       "component_scores", "one per sequence and component");
  detail::require_size(advantages.size(), tokens.tokens, "advantages", "one per token");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::gdpo_advantages(temp, bytes, inputs.component_scores.data(),
                                     inputs.weights.data(), inputs.weights.size(), groups, tokens,
                                     advantages.data(), options, policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"component_scores"},
                                  "is a group of one sequence, but GRPO with the unbiased std "
                                  "needs at least 2 (set options.singleton to accept it)");
  cuda::detail::throw_if_whitening_refused(report);
}

}  // namespace cascade_rl
