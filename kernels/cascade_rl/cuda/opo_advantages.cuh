#pragma once
// OPO (opo_advantages.hpp of the host core) on the device: a thread per group runs the
// host's length-weighted baseline (terms/length_weighted_baseline.hpp) in the host's
// order; the host's bits.
//
// Three layers, one file each: kernel/opo_advantages.cuh (the kernel),
// device/opo_advantages.cuh (CUB's shape: temporary storage, cudaError_t, the stream
// last) and this file, the throwing convenience overload of the host algorithm.

#include <cstddef>
#include <span>
#include <string>

#include "cascade_rl/algorithms/opo_advantages.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/opo_advantages.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl {

// Spans point to device memory; the call waits for its stream.
template <std::floating_point T>
void opo_advantages(exec::cuda_policy policy, const cuda::device_group_layout& groups,
                    const cuda::device_token_layout& tokens, std::span<const T> scores,
                    std::span<T> advantages, const opo_options& options = {}) {
  detail::require_size(tokens.sequences, scores.size(), "tokens", "one sequence per score");
  detail::require_size(advantages.size(), tokens.tokens, "advantages", "one per token");
  groups.require_sequences(scores.size(), "scores");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::opo_advantages(temp, bytes, scores.data(), groups, tokens, advantages.data(),
                                    options, policy.stream);
      });
  cuda::detail::throw_if_reported(
      report, {"scores"},
      "is a group of one sequence, but OPO needs at least 2 (set options.singleton to accept it)");
}

}  // namespace cascade_rl
