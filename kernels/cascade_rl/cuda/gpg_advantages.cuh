#pragma once
// GPG (gpg_advantages.hpp of the host core) on the device: the batch's non-zero scores
// counted (exact integers), then a thread per group with the host's moments
// (terms::group_moments_of) and terms/gpg_advantage.hpp; the host's bits.
//
// Three layers, one file each: kernel/gpg_advantages.cuh (the kernels),
// device/gpg_advantages.cuh (CUB's shape: temporary storage, cudaError_t, the stream
// last) and this file, the throwing convenience overload of the host algorithm.

#include <cstddef>
#include <span>
#include <string>

#include "cascade_rl/algorithms/gpg_advantages.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/gpg_advantages.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl {

// Spans point to device memory; the call waits for its stream.
template <std::floating_point T>
void gpg_advantages(exec::cuda_policy policy, const cuda::device_group_layout& groups,
                    std::span<const T> scores, std::span<T> advantages,
                    const gpg_options& options = {}) {
  detail::require_gpg_options(options);
  groups.require_sequences(scores.size(), "scores");
  detail::require_size(advantages.size(), scores.size(), "advantages", "one per score");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::gpg_advantages(temp, bytes, scores.data(), groups, advantages.data(), options,
                                    policy.stream);
      });
  cuda::detail::throw_if_reported(
      report, {"scores"},
      "is a group of one sequence, but GPG needs at least 2 (set options.singleton to accept it)");
}

}  // namespace cascade_rl
