#pragma once
// The pre-pass kernel of the sequence-level ratio losses (device/sequence_ratio_losses.cuh
// launches it before the token losses' kernels): a thread per sequence adds its valid
// tokens' log-ratios in index order (terms/sequence_ratio_tokens.hpp, the host's order and
// bits) and writes the sequence's mean.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/kernel/token_losses.cuh"
#include "cascade_rl/terms/sequence_ratio_tokens.hpp"

namespace cascade_rl::cuda::detail {

// out[s] = terms::sequence_mean_log_ratio over sequence s. Reports broken offsets.
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
    sequence_log_ratio_kernel(device_token_layout layout, const T* __restrict__ log_probs,
                              const T* __restrict__ old_log_probs, double* __restrict__ out,
                              device_report* report) {
  const std::size_t s = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= layout.sequences) return;
  std::size_t first = 0, last = 0;
  sequence_range(layout, s, true, report, first, last);
  out[s] = terms::sequence_mean_log_ratio(log_probs, old_log_probs, layout.mask, first, last);
}

// out[s] = terms::geo_mean_sequence_loss over sequence s. Reports broken offsets.
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
    geo_mean_sequence_kernel(device_token_layout layout, const T* __restrict__ log_probs,
                             const T* __restrict__ old_log_probs, const T* __restrict__ advantages,
                             const T* __restrict__ rollout_is_weights,
                             geo_mean_options params, double* __restrict__ out,
                             device_report* report) {
  const std::size_t s = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= layout.sequences) return;
  std::size_t first = 0, last = 0;
  sequence_range(layout, s, true, report, first, last);
  out[s] = terms::geo_mean_sequence_loss(log_probs, old_log_probs, advantages, rollout_is_weights,
                                         layout.mask, first, last, params);
}

// out[s] = terms::sequence_sapo_row_of over sequence s (its ratio and the gradient each of
// its valid tokens receives). Reports broken offsets.
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
    sequence_sapo_row_kernel(device_token_layout layout, const T* __restrict__ log_probs,
                             const T* __restrict__ old_log_probs, const T* __restrict__ advantages,
                             sequence_sapo_options params, terms::sequence_sapo_row* __restrict__ out,
                             device_report* report) {
  const std::size_t s = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= layout.sequences) return;
  std::size_t first = 0, last = 0;
  sequence_range(layout, s, true, report, first, last);
  out[s] = terms::sequence_sapo_row_of(log_probs, old_log_probs, advantages, layout.mask, first,
                                       last, params);
}

}  // namespace cascade_rl::cuda::detail
