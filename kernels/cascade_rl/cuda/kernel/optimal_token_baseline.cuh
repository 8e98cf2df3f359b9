#pragma once
// The optimal token baseline's kernels (device/optimal_token_baseline.cuh launches them): a
// thread per sequence (returns, cumulative weights, valid counts, ranks' tokens:
// terms::otb_sequence), then a thread per group (the baselines position by position in row
// order: terms::otb_group), the host's code, order and bits.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/terms/optimal_token_baseline.hpp"

namespace cascade_rl::cuda::detail {

// Reports broken offsets and NaN or infinite inputs on valid tokens, in the host's order:
// rewards, old log-probs, sum pi^2, weights (first_nonfinite[0..3]).
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
    otb_sequence_kernel(const T* __restrict__ rewards, const T* __restrict__ old_log_probs,
                        const T* __restrict__ sum_pi_squared, const T* __restrict__ rho,
                        device_token_layout layout, T* __restrict__ advantages,
                        T* __restrict__ returns, double* __restrict__ cumulative,
                        std::size_t* __restrict__ counts, std::size_t* __restrict__ compacted,
                        device_report* report) {
  const std::size_t s = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= layout.sequences) return;
  std::size_t first = 0, last = 0;
  sequence_range(layout, s, true, report, first, last);
  for (std::size_t t = first; t < last; ++t) {
    if (!layout.valid(t)) continue;
    if (!::cuda::std::isfinite(rewards[t]))
      report_nonfinite(&report->first_nonfinite[0], t, rewards[t]);
    if (!::cuda::std::isfinite(old_log_probs[t]))
      report_nonfinite(&report->first_nonfinite[1], t, old_log_probs[t]);
    if (!::cuda::std::isfinite(sum_pi_squared[t]))
      report_nonfinite(&report->first_nonfinite[2], t, sum_pi_squared[t]);
    if (rho != nullptr && !::cuda::std::isfinite(rho[t]))
      report_nonfinite(&report->first_nonfinite[3], t, rho[t]);
  }
  terms::otb_sequence(terms::otb_rows{layout.offsets, layout.mask}, s, first, last, rewards,
                      old_log_probs, sum_pi_squared, rho, returns, advantages, cumulative, counts,
                      compacted);
}

// Reports broken group offsets.
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
    otb_group_kernel(device_group_layout groups, device_token_layout layout,
                     const std::size_t* __restrict__ counts,
                     const std::size_t* __restrict__ compacted, const T* __restrict__ returns,
                     const double* __restrict__ cumulative, T* __restrict__ advantages,
                     double epsilon, bool handle_zero_tail, device_report* report) {
  const std::size_t g = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t first = 0, last = 0;
  if (g >= groups.groups || !group_range(groups, g, report, first, last)) return;
  terms::otb_group(terms::otb_rows{layout.offsets, layout.mask}, first, last, counts, compacted,
                   returns, cumulative, advantages, epsilon, handle_zero_tail);
}

}  // namespace cascade_rl::cuda::detail
