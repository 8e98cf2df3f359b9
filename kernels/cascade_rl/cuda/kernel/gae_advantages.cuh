#pragma once
// The GAE kernel (device/gae_advantages.cuh launches it, then the whitening of
// kernel/reinforce_plus_plus.cuh): a thread per sequence runs the host's backward
// recurrence (terms/generalized_advantage.hpp) in the host's order, so the unwhitened
// advantages and the returns are the host's bits.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/terms/generalized_advantage.hpp"

namespace cascade_rl::cuda::detail {

// Reports NaN or infinite rewards (first_nonfinite[0]) and values (first_nonfinite[1])
// on valid tokens.
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
gae_kernel(const T* __restrict__ rewards, const T* __restrict__ values,
           device_token_layout layout, T* __restrict__ advantages, T* __restrict__ returns,
           double gamma, double gamma_lambda, device_report* report) {
  const std::size_t s = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= layout.sequences) return;
  std::size_t first = 0, last = 0;
  sequence_range(layout, s, true, report, first, last);
  terms::gae_state state;
  for (std::size_t t = last; t-- > first;) {
    const bool valid = layout.valid(t);
    const T value = values[t];
    const T reward = valid ? rewards[t] : T(0);
    if (valid && !::cuda::std::isfinite(reward))
      report_nonfinite(&report->first_nonfinite[0], t, reward);
    if (valid && !::cuda::std::isfinite(value))
      report_nonfinite(&report->first_nonfinite[1], t, value);
    state = terms::gae_step(static_cast<double>(reward), static_cast<double>(value), valid, gamma,
                            gamma_lambda, state);
    const T advantage = static_cast<T>(state.advantage);
    advantages[t] = advantage;
    returns[t] = static_cast<T>(static_cast<double>(advantage) + static_cast<double>(value));
  }
}

}  // namespace cascade_rl::cuda::detail
