#pragma once
// The ReMax kernel (device/remax_advantages.cuh launches it): a thread per sequence runs
// the host's backward reward-to-go (terms/reward_to_go.hpp) in the host's order, so the
// returns and advantages are the host's bits.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/terms/reward_to_go.hpp"

namespace cascade_rl::cuda::detail {

// Reports NaN or infinite rewards on valid tokens (first_nonfinite[0]) and baselines
// (first_nonfinite[1]).
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
remax_kernel(const T* __restrict__ rewards, const T* __restrict__ baselines,
             device_token_layout layout, T* __restrict__ advantages, T* __restrict__ returns,
             device_report* report) {
  const std::size_t s = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= layout.sequences) return;
  std::size_t first = 0, last = 0;
  sequence_range(layout, s, true, report, first, last);
  const T baseline = baselines[s];
  if (!::cuda::std::isfinite(baseline)) report_nonfinite(&report->first_nonfinite[1], s, baseline);
  double run = 0.0;
  for (std::size_t t = last; t-- > first;) {
    const bool valid = layout.valid(t);
    const T reward = valid ? rewards[t] : T(0);
    if (valid && !::cuda::std::isfinite(reward))
      report_nonfinite(&report->first_nonfinite[0], t, reward);
    run = terms::reward_to_go(static_cast<double>(reward), valid, run);
    const T stored = static_cast<T>(run);
    returns[t] = stored;
    advantages[t] = terms::baseline_advantage(stored, baseline, valid);
  }
}

}  // namespace cascade_rl::cuda::detail
