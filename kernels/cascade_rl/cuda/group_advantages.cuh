#pragma once
// Group statistics fused with GRPO / Dr. GRPO / RLOO advantages: one kernel launch reads
// each group's rewards, reduces min, max, sum and the squared deviations, and writes the
// per-sequence advantages (and, when asked, the group's statistics). The same kernel
// writes leave-one-out statistics (the mean and std of the other rewards of the group,
// downdated from the group's moments) and REINFORCE++-baseline's score - mean.
//
// Teams: groups up to 32 use a part of a warp (4, 8, 16 or 32 lanes) per group, groups up
// to 1024 a whole warp, larger ones a block of 256 threads. The team looks for NaN and
// infinite rewards and writes the advantages side by side; the moments (min, max, the
// sums, the squared deviations) are the team leader's terms::group_moments_of, the host
// core's own function in its sequential order, handed to the other lanes. So every
// output is the host's bits. (Groups are small: a GRPO group is a handful to a few
// hundred rollouts, a sequential pass over them is not what limits this kernel.)
//
// Three layers, one file each: kernel/group_advantages.cuh (the kernel),
// device/group_advantages.cuh (CUB's shape: temporary storage, cudaError_t, the stream
// last) and this file, the throwing convenience overloads of the host algorithms.

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <string>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/group_advantages.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl::cuda::detail {

template <class T>
void require_group_sizes(std::size_t rewards, const device_group_layout& groups, std::size_t out,
                         const char* out_name, const char* what) {
  groups.require_sequences(rewards, "rewards");
  cascade_rl::detail::require_size(out, rewards, out_name, what);
}

// Runs one of the group functions with owned temporary storage, waits, and throws what
// the report holds.
template <class Run>
void run_groups_throwing(cudaStream_t stream, const char* singleton_message, Run run) {
  throw_if_reported(run_and_report(stream, run), {"rewards"}, singleton_message);
}

}  // namespace cascade_rl::cuda::detail

// ---- the throwing convenience layer: exec::cuda overloads of the host algorithms ---------
// Spans point to device memory. Each call waits for its stream (to read the report).

namespace cascade_rl {

template <std::floating_point T>
void group_statistics(exec::cuda_policy policy, const cuda::device_group_layout& groups,
                      std::span<const T> rewards, std::span<group_statistic> statistics,
                      const group_statistics_options& options = {}) {
  groups.require_sequences(rewards.size(), "rewards");
  detail::require_size(statistics.size(), groups.groups, "statistics", "one per group");
  cuda::detail::run_groups_throwing(policy.stream, nullptr, [&](void* temp, std::size_t& bytes) {
    return cuda::group_statistics(temp, bytes, rewards.data(), groups, statistics.data(), options,
                                  policy.stream);
  });
}

template <std::floating_point T>
void grpo_advantages(exec::cuda_policy policy, const cuda::device_group_layout& groups,
                     std::span<const T> rewards, std::span<T> advantages,
                     const grpo_options& options = {}) {
  detail::require_epsilon(options.epsilon, "epsilon");
  cuda::detail::require_group_sizes<T>(rewards.size(), groups, advantages.size(), "advantages",
                                       "one per sequence");
  cuda::detail::run_groups_throwing(
      policy.stream,
      "is a group of one sequence, but GRPO with the unbiased std needs at least 2 (set "
      "options.singleton to accept it)",
      [&](void* temp, std::size_t& bytes) {
        return cuda::grpo_advantages(temp, bytes, rewards.data(), groups, advantages.data(),
                                     nullptr, options, policy.stream);
      });
}

template <std::floating_point T>
void rloo_advantages(exec::cuda_policy policy, const cuda::device_group_layout& groups,
                     std::span<const T> rewards, std::span<T> advantages,
                     const rloo_options& options = {}) {
  cuda::detail::require_group_sizes<T>(rewards.size(), groups, advantages.size(), "advantages",
                                       "one per sequence");
  cuda::detail::run_groups_throwing(
      policy.stream,
      "is a group of one sequence, but RLOO needs at least 2 (set options.singleton to accept it)",
      [&](void* temp, std::size_t& bytes) {
        return cuda::rloo_advantages(temp, bytes, rewards.data(), groups, advantages.data(),
                                     nullptr, options, policy.stream);
      });
}

// Per sequence, the mean and (when loo_std is not empty) the std of the other rewards of
// its group: the RLOO baseline. Needs groups of at least 2.
template <std::floating_point T>
void leave_one_out_statistics(exec::cuda_policy policy, const cuda::device_group_layout& groups,
                              std::span<const T> rewards, std::span<T> loo_mean,
                              std::span<T> loo_std, const leave_one_out_options& options = {}) {
  groups.require_sequences(rewards.size(), "rewards");
  detail::require_size(loo_mean.size(), rewards.size(), "loo_mean", "one per sequence");
  if (!loo_std.empty())
    detail::require_size(loo_std.size(), rewards.size(), "loo_std", "one per sequence, or empty to skip");
  cuda::detail::run_groups_throwing(
      policy.stream,
      "is a group of one sequence, but a leave-one-out statistic needs at least 2 (set "
      "options.singleton to accept it)",
      [&](void* temp, std::size_t& bytes) {
        return cuda::leave_one_out_statistics(temp, bytes, rewards.data(), groups, loo_mean.data(),
                                              loo_std.empty() ? nullptr : loo_std.data(), options,
                                              policy.stream);
      });
}

}  // namespace cascade_rl
