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
// CUB's shape: call once with d_temp_storage == nullptr to get temp_storage_bytes, then
// again to run. The temporary storage holds the device_report: after the stream reaches
// the end of the call, report_of(d_temp_storage) says which rewards were NaN or infinite
// (under nonfinite_rule::error) and which groups of one the options refuse.

#include <cuda_runtime.h>

#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl::cuda {

// The device_report at the start of a call's temporary storage.
inline device_report* report_of(void* d_temp_storage) {
  return static_cast<device_report*>(d_temp_storage);
}

namespace detail {

inline constexpr unsigned group_block_threads = 256;

// Lanes 0..W-1 of a team cooperate on one group (W == 0: the whole block).
template <int W>
struct group_team {
  __device__ static unsigned lane() { return W == 0 ? threadIdx.x : threadIdx.x % W; }
  __device__ static unsigned width() { return W == 0 ? blockDim.x : W; }
  __device__ static std::size_t group() {
    return W == 0 ? blockIdx.x
                  : (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / W;
  }
  template <class V, class Op>
  __device__ static V reduce(V v, Op op, unsigned char* shared) {
    if constexpr (W == 0)
      return block_reduce(v, op, shared);
    else
      return team_reduce<W>(v, op);
  }
  // The team leader's value (any trivially copyable V), for every lane.
  template <class V>
  __device__ static V from_leader(V v, unsigned char* shared) {
    static_assert(sizeof(V) <= block_reduce_bytes);
    if constexpr (W == 0) {
      __syncthreads();
      if (threadIdx.x == 0) memcpy(shared, &v, sizeof v);
      __syncthreads();
      memcpy(&v, shared, sizeof v);
      __syncthreads();
      return v;
    } else {
      constexpr int words = static_cast<int>((sizeof(V) + sizeof(unsigned) - 1) / sizeof(unsigned));
      unsigned w[words] = {};
      memcpy(w, &v, sizeof v);
      for (int k = 0; k < words; ++k) w[k] = __shfl_sync(full_warp, w[k], 0, W);
      memcpy(&v, w, sizeof v);
      return v;
    }
  }
};

struct first_of {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return b < a ? b : a;
  }
};

template <int W, class T>
__global__ void __launch_bounds__(group_block_threads)
group_kernel(const T* __restrict__ rewards, device_group_layout groups, T* __restrict__ advantages,
             T* __restrict__ second, group_statistic* __restrict__ statistics, group_params p,
             device_report* report) {
  using team = group_team<W>;
  __shared__ __align__(16) unsigned char shared[32 * block_reduce_bytes];
  const std::size_t g = team::group();
  const unsigned lane = team::lane();
  const unsigned width = team::width();
  // Every lane runs every reduction (shuffles need the whole warp): an inactive or
  // broken group just has an empty range.
  std::size_t first = 0, last = 0;
  if (g < groups.groups) {
    first = groups.begin(g);
    last = groups.end(g);
    if (last <= first || last > groups.sequences || (g == 0 && first != 0)) {
      if (lane == 0) report_min(&report->first_bad_offset, g == 0 && first != 0 ? 0 : g + 1);
      first = last = 0;
    }
  }
  const std::size_t count = last - first;

  // The first NaN or infinite reward of the group (device_report::nonfinite_entry).
  unsigned long long first_bad = device_report::none;
  for (std::size_t i = first + lane; i < last; i += width) {
    const T r = rewards[i];
    if (!::cuda::std::isfinite(r)) {
      first_bad = device_report::nonfinite_entry(i, ::cuda::std::isinf(r));
      break;
    }
  }
  first_bad = team::reduce(first_bad, first_of{}, shared);

  // The moments the host core computes, by the leader in the host's order; a group with
  // a non-finite reward has only its count (terms::plan_group zeroes it).
  group_moments m;
  if (lane == 0) {
    if (count > 0 && first_bad == device_report::none)
      m = terms::group_moments_of(rewards, first, last, p.accumulation);
    m.count = count;
    m.nonfinite = first_bad != device_report::none;
  }
  m = team::from_leader(m, shared);

  if (count == 0) return;
  if (lane == 0) {
    const bool refuse_nonfinite =
        p.kind == group_kind::statistics || p.nonfinite == nonfinite_rule::error;
    if (m.nonfinite && refuse_nonfinite) report_min(&report->first_nonfinite[0], first_bad);
    if (count == 1 && p.refuse_singletons) report_min(&report->first_singleton, g);
    if (statistics != nullptr) {
      group_statistic s;
      s.mean = m.mean;
      s.std = terms::group_std(m, p.estimator);
      s.min = m.min;
      s.max = m.max;
      s.count = m.count;
      s.zero_variance = m.zero_variance;
      statistics[g] = s;
    }
  }
  if (advantages == nullptr) return;
  if (p.kind == group_kind::leave_one_out) {  // advantages: loo_mean; second: loo_std or null
    for (std::size_t i = first + lane; i < last; i += width) {
      const terms::leave_one_out_value v = terms::leave_one_out_of(rewards[i], m, p.estimator);
      advantages[i] = static_cast<T>(v.mean);
      if (second != nullptr) second[i] = static_cast<T>(v.std);
    }
    return;
  }
  const group_plan plan = plan_group(m, p);
  for (std::size_t i = first + lane; i < last; i += width)
    advantages[i] = advantage_of(rewards[i], m, plan, p);
}

template <int W, class T>
cudaError_t launch_group_kernel(const T* rewards, const device_group_layout& groups, T* advantages,
                                T* second, group_statistic* statistics, const group_params& p,
                                device_report* report, cudaStream_t stream) {
  const unsigned blocks = W == 0 ? static_cast<unsigned>(groups.groups)
                                 : blocks_for(groups.groups * W, group_block_threads);
  return launch(group_kernel<W, T>, blocks, group_block_threads, stream, rewards, groups, advantages,
                second, statistics, p, report);
}

// The group kernel for the groups' size hint, reporting into `report` (already reset).
template <class T>
cudaError_t launch_groups(const T* rewards, const device_group_layout& groups, T* advantages,
                          T* second, group_statistic* statistics, const group_params& p,
                          device_report* report, cudaStream_t stream) {
  if (groups.groups == 0) return cudaSuccess;
  const std::size_t size = groups.max_group_size == 0 ? 1024 : groups.max_group_size;
  if (size <= 4) return launch_group_kernel<4>(rewards, groups, advantages, second, statistics, p, report, stream);
  if (size <= 8) return launch_group_kernel<8>(rewards, groups, advantages, second, statistics, p, report, stream);
  if (size <= 16) return launch_group_kernel<16>(rewards, groups, advantages, second, statistics, p, report, stream);
  if (size <= 1024) return launch_group_kernel<32>(rewards, groups, advantages, second, statistics, p, report, stream);
  return launch_group_kernel<0>(rewards, groups, advantages, second, statistics, p, report, stream);
}

template <class T>
cudaError_t run_groups(void* d_temp_storage, std::size_t& temp_storage_bytes, const T* rewards,
                       const device_group_layout& groups, T* advantages, T* second,
                       group_statistic* statistics, const group_params& p, cudaStream_t stream) {
  device_report* report = nullptr;
  if (const call_start start = begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  return launch_groups(rewards, groups, advantages, second, statistics, p, report, stream);
}

}  // namespace detail

// ---- the CUB-style layer ----------------------------------------------------------------

template <class T>
cudaError_t group_statistics(void* d_temp_storage, std::size_t& temp_storage_bytes,
                             const T* d_rewards, const device_group_layout& groups,
                             group_statistic* d_statistics, const group_statistics_options& options,
                             cudaStream_t stream = nullptr) {
  return detail::run_groups<T>(d_temp_storage, temp_storage_bytes, d_rewards, groups, nullptr,
                               nullptr, d_statistics, detail::group_params_of(options), stream);
}

// d_statistics may be null; when given it receives the statistics under the options.
template <class T>
cudaError_t grpo_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes,
                            const T* d_rewards, const device_group_layout& groups, T* d_advantages,
                            group_statistic* d_statistics, const grpo_options& options,
                            cudaStream_t stream = nullptr) {
  return detail::run_groups<T>(d_temp_storage, temp_storage_bytes, d_rewards, groups, d_advantages,
                               nullptr, d_statistics, detail::group_params_of(options), stream);
}

template <class T>
cudaError_t rloo_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes,
                            const T* d_rewards, const device_group_layout& groups, T* d_advantages,
                            group_statistic* d_statistics, const rloo_options& options,
                            cudaStream_t stream = nullptr) {
  return detail::run_groups<T>(d_temp_storage, temp_storage_bytes, d_rewards, groups, d_advantages,
                               nullptr, d_statistics, detail::group_params_of(options), stream);
}

// Per sequence, the mean and (when d_loo_std is not null) the std of the other rewards
// of its group, as leave_one_out_statistics of the host core. The report names NaN or
// infinite rewards and the first group of one (always refused).
template <class T>
cudaError_t leave_one_out_statistics(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                     const T* d_rewards, const device_group_layout& groups,
                                     T* d_loo_mean, T* d_loo_std,
                                     const leave_one_out_options& options = {},
                                     cudaStream_t stream = nullptr) {
  return detail::run_groups<T>(d_temp_storage, temp_storage_bytes, d_rewards, groups, d_loo_mean,
                               d_loo_std, nullptr, detail::group_params_of(options), stream);
}

namespace detail {

template <class T>
void require_group_sizes(std::size_t rewards, const device_group_layout& groups, std::size_t out,
                         const char* out_name, const char* what) {
  if (rewards != groups.sequences)
    cascade_rl::detail::fail("rewards", "has " + std::to_string(rewards) + " entries, but the groups hold " +
                        std::to_string(groups.sequences) + " sequences");
  cascade_rl::detail::require_size(out, rewards, out_name, what);
}

// Runs one of the group functions with owned temporary storage, waits, and throws what
// the report holds.
template <class Run>
void run_groups_throwing(cudaStream_t stream, const char* singleton_message, Run run) {
  throw_if_reported(run_and_report(stream, run), {"rewards"}, singleton_message);
}

}  // namespace detail
}  // namespace cascade_rl::cuda

// ---- the throwing convenience layer: exec::cuda overloads of the host algorithms ---------
// Spans point to device memory. Each call waits for its stream (to read the report).

namespace cascade_rl {

template <std::floating_point T>
void group_statistics(exec::cuda_policy policy, std::span<const T> rewards,
                      const cuda::device_group_layout& groups, std::span<group_statistic> statistics,
                      const group_statistics_options& options = {}) {
  if (rewards.size() != groups.sequences)
    detail::fail("rewards", "has " + std::to_string(rewards.size()) + " entries, but the groups hold " +
                                std::to_string(groups.sequences) + " sequences");
  detail::require_size(statistics.size(), groups.groups, "statistics", "one per group");
  cuda::detail::run_groups_throwing(policy.stream, nullptr, [&](void* temp, std::size_t& bytes) {
    return cuda::group_statistics(temp, bytes, rewards.data(), groups, statistics.data(), options,
                                  policy.stream);
  });
}

template <std::floating_point T>
void grpo_advantages(exec::cuda_policy policy, std::span<const T> rewards,
                     const cuda::device_group_layout& groups, std::span<T> advantages,
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
void rloo_advantages(exec::cuda_policy policy, std::span<const T> rewards,
                     const cuda::device_group_layout& groups, std::span<T> advantages,
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
void leave_one_out_statistics(exec::cuda_policy policy, std::span<const T> rewards,
                              const cuda::device_group_layout& groups, std::span<T> loo_mean,
                              std::span<T> loo_std, const leave_one_out_options& options = {}) {
  if (rewards.size() != groups.sequences)
    detail::fail("rewards", "has " + std::to_string(rewards.size()) + " entries, but the groups hold " +
                                std::to_string(groups.sequences) + " sequences");
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
