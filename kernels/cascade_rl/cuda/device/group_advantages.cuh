#pragma once
// The CUB-shaped layer of the group estimators: group statistics, GRPO / Dr. GRPO,
// RLOO and leave-one-out statistics, one launch of kernel/group_advantages.cuh each.
// Call once with d_temp_storage == nullptr to get temp_storage_bytes, then again to
// run; nothing allocates or synchronises. The temporary storage holds the
// device_report: after the stream reaches the end of the call, report_of(d_temp_storage)
// says which rewards were NaN or infinite (under nonfinite_rule::error) and which
// groups of one the options refuse.

#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/group_advantages.cuh"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/group_advantage.hpp"

namespace cascade_rl::cuda {
namespace detail {

template <class Tuning, int W, class T>
cudaError_t launch_group_kernel(const T* rewards, const device_group_layout& groups, T* advantages,
                                T* second, group_statistic* statistics, const group_params& p,
                                device_report* report, cudaStream_t stream) {
  const unsigned blocks = W == 0 ? static_cast<unsigned>(groups.groups)
                                 : blocks_for(groups.groups * W, Tuning::group_block_threads);
  return launch(group_kernel<Tuning, W, T>, blocks, Tuning::group_block_threads, stream, rewards, groups,
                advantages, second, statistics, p, report);
}

// The group kernel for the groups' size hint, reporting into `report` (already reset).
template <class Tuning, class T>
cudaError_t launch_groups(const T* rewards, const device_group_layout& groups, T* advantages,
                          T* second, group_statistic* statistics, const group_params& p,
                          device_report* report, cudaStream_t stream) {
  if (groups.groups == 0) return cudaSuccess;
  const std::size_t size = groups.max_group_size == 0 ? 1024 : groups.max_group_size;
  if (size <= 4) return launch_group_kernel<Tuning, 4>(rewards, groups, advantages, second, statistics, p, report, stream);
  if (size <= 8) return launch_group_kernel<Tuning, 8>(rewards, groups, advantages, second, statistics, p, report, stream);
  if (size <= 16) return launch_group_kernel<Tuning, 16>(rewards, groups, advantages, second, statistics, p, report, stream);
  if (size <= 1024) return launch_group_kernel<Tuning, 32>(rewards, groups, advantages, second, statistics, p, report, stream);
  return launch_group_kernel<Tuning, 0>(rewards, groups, advantages, second, statistics, p, report, stream);
}

template <class Tuning, class T>
cudaError_t run_groups(void* d_temp_storage, std::size_t& temp_storage_bytes, const T* rewards,
                       const device_group_layout& groups, T* advantages, T* second,
                       group_statistic* statistics, const group_params& p, cudaStream_t stream) {
  device_report* report = nullptr;
  if (const call_start start = begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  return launch_groups<Tuning>(rewards, groups, advantages, second, statistics, p, report, stream);
}

}  // namespace detail

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t group_statistics(void* d_temp_storage, std::size_t& temp_storage_bytes,
                             const T* d_rewards, const device_group_layout& groups,
                             group_statistic* d_statistics, const group_statistics_options& options,
                             cudaStream_t stream = nullptr) {
  return detail::run_groups<Tuning, T>(d_temp_storage, temp_storage_bytes, d_rewards, groups, nullptr,
                               nullptr, d_statistics, detail::group_params_of(options), stream);
}

// d_statistics may be null; when given it receives the statistics under the options.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t grpo_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes,
                            const T* d_rewards, const device_group_layout& groups, T* d_advantages,
                            group_statistic* d_statistics, const grpo_options& options,
                            cudaStream_t stream = nullptr) {
  return detail::run_groups<Tuning, T>(d_temp_storage, temp_storage_bytes, d_rewards, groups, d_advantages,
                               nullptr, d_statistics, detail::group_params_of(options), stream);
}

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t rloo_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes,
                            const T* d_rewards, const device_group_layout& groups, T* d_advantages,
                            group_statistic* d_statistics, const rloo_options& options,
                            cudaStream_t stream = nullptr) {
  return detail::run_groups<Tuning, T>(d_temp_storage, temp_storage_bytes, d_rewards, groups, d_advantages,
                               nullptr, d_statistics, detail::group_params_of(options), stream);
}

// Per sequence, the mean and (when d_loo_std is not null) the std of the other rewards
// of its group, as leave_one_out_statistics of the host core. The report names NaN or
// infinite rewards and the first group of one (always refused).
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t leave_one_out_statistics(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                     const T* d_rewards, const device_group_layout& groups,
                                     T* d_loo_mean, T* d_loo_std,
                                     const leave_one_out_options& options = {},
                                     cudaStream_t stream = nullptr) {
  return detail::run_groups<Tuning, T>(d_temp_storage, temp_storage_bytes, d_rewards, groups, d_loo_mean,
                               d_loo_std, nullptr, detail::group_params_of(options), stream);
}

}  // namespace cascade_rl::cuda
