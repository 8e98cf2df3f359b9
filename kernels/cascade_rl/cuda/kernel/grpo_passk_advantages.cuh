#pragma once
// The GRPO pass@k kernel (device/grpo_passk_advantages.cuh launches it): a thread per
// group runs the host's terms::passk_group (moments and top two in index order); the
// host's bits.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/passk_advantage.hpp"

namespace cascade_rl::cuda::detail {

// Reports broken group offsets, NaN or infinite scores under nonfinite_rule::error
// (first_nonfinite[0]) and groups of one under singleton_rule::error.
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
grpo_passk_kernel(const T* __restrict__ scores, device_group_layout groups,
                  T* __restrict__ advantages, grpo_passk_options options, device_report* report) {
  const std::size_t g = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t first = 0, last = 0;
  if (g >= groups.groups || !group_range(groups, g, report, first, last)) return;
  const bool bad =
      scan_group_scores(scores, g, first, last, options.singleton, options.nonfinite, report);
  terms::passk_group(scores, first, last, bad, options, advantages);
}

}  // namespace cascade_rl::cuda::detail
