#pragma once
// The OPO kernel (device/opo_advantages.cuh launches it): a thread per group adds its
// sequences' length-weighted scores in index order (terms/length_weighted_baseline.hpp,
// the host's order and bits) and writes the advantage on every token of the group.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/length_weighted_baseline.hpp"

namespace cascade_rl::cuda::detail {

// Reports broken group offsets, NaN or infinite scores under nonfinite_rule::error
// (first_nonfinite[0]) and groups of one under singleton_rule::error.
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
opo_kernel(const T* __restrict__ scores, device_group_layout groups, device_token_layout layout,
           T* __restrict__ advantages, opo_options options, device_report* report) {
  const std::size_t g = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t first = 0, last = 0;
  if (g >= groups.groups || !group_range(groups, g, report, first, last)) return;
  const bool nonfinite =
      scan_group_scores(scores, g, first, last, options.singleton, options.nonfinite, report);
  const bool zero_group = nonfinite && options.nonfinite == nonfinite_rule::zero_group;
  terms::opo_sums sums;
  if (!nonfinite) {
    for (std::size_t s = first; s < last; ++s) {
      std::size_t begin = 0, end = 0, n = 0;
      sequence_range(layout, s, true, report, begin, end);
      for (std::size_t t = begin; t < end; ++t) n += layout.valid(t) ? 1 : 0;
      terms::opo_add(sums, static_cast<double>(scores[s]), n);
    }
  }
  const terms::opo_group plan = terms::opo_group_of(sums, options.singleton, zero_group);
  for (std::size_t s = first; s < last; ++s) {
    std::size_t begin = 0, end = 0;
    sequence_range(layout, s, true, report, begin, end);
    for (std::size_t t = begin; t < end; ++t)
      advantages[t] = terms::opo_advantage(scores[s], plan, layout.valid(t));
  }
}

}  // namespace cascade_rl::cuda::detail
