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
  if (g >= groups.groups) return;
  const std::size_t first = groups.begin(g), last = groups.end(g);
  if (last <= first || last > groups.sequences || (g == 0 && first != 0)) {
    report_min(&report->first_bad_offset, g == 0 && first != 0 ? 0 : g + 1);
    return;
  }
  if (last - first == 1 && options.singleton == singleton_rule::error)
    report_min(&report->first_singleton, g);
  bool bad = false;
  for (std::size_t s = first; s < last; ++s)
    if (!::cuda::std::isfinite(scores[s])) {
      if (options.nonfinite == nonfinite_rule::error)
        report_nonfinite(&report->first_nonfinite[0], s, scores[s]);
      bad = true;
    }
  terms::passk_group(scores, first, last, bad, options, advantages);
}

}  // namespace cascade_rl::cuda::detail
