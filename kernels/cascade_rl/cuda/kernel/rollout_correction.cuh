#pragma once
// The kernels of the rollout correction: a check of the inputs (a thread per token, the
// first NaN or infinite valid log-prob of each input reported), then the functors of
// detail/rollout_correction_terms.hpp run by detail::for_each_kernel (one thread per row
// for the pre-pass and the token pass, one per canonical block of reduce_block_size tokens
// for the channel sums), the same functors the portable Thrust path runs, so the results
// are the host's.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/rollout_correction_terms.hpp"
#include "cascade_rl/cuda/device_layout.hpp"

namespace cascade_rl::cuda::detail {

// Slots 0 and 1 of report->first_nonfinite: log_probs and rollout_log_probs, in the host
// core's order of validation.
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
    rollout_check_kernel(const T* __restrict__ log_probs, const T* __restrict__ rollout_log_probs,
                         device_token_layout layout, device_report* report) {
  const std::size_t t = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= layout.tokens || !layout.valid(t)) return;
  if (!::cuda::std::isfinite(log_probs[t]))
    report_nonfinite(&report->first_nonfinite[0], t, log_probs[t]);
  if (!::cuda::std::isfinite(rollout_log_probs[t]))
    report_nonfinite(&report->first_nonfinite[1], t, rollout_log_probs[t]);
}

}  // namespace cascade_rl::cuda::detail
