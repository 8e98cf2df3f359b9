#pragma once
// The CUB-shaped layer of the optimal token baseline. Size query with d_temp_storage ==
// nullptr, then the run; the temporary storage holds the device_report (report_of: broken
// offsets, NaN or infinite rewards, old log-probs, sum pi^2 and weights on valid tokens in
// first_nonfinite[0..3]), the cumulative weights (a double per token), the valid counts (one
// per sequence) and, under options.multi_turn, the ranks' tokens (one per token).
// layout.sequences must equal groups.sequences and options.epsilon be finite and >= 0 (else
// cudaErrorInvalidValue).

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/optimal_token_baseline.cuh"
#include "cascade_rl/options/group_estimators.hpp"

namespace cascade_rl::cuda {

// d_advantages: G - B on valid tokens, 0 on masked ones; d_returns: G on every token.
// d_rollout_is_weights null: none.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t optimal_token_baseline_advantages(
    void* d_temp_storage, std::size_t& temp_storage_bytes, const T* d_token_rewards,
    const T* d_old_log_probs, const T* d_sum_pi_squared, const T* d_rollout_is_weights,
    const device_group_layout& groups, const device_token_layout& layout, T* d_advantages,
    T* d_returns, const optimal_token_baseline_options& options = {},
    cudaStream_t stream = nullptr) {
  if (layout.sequences != groups.sequences) return cudaErrorInvalidValue;
  if (!(::cuda::std::isfinite(options.epsilon) && options.epsilon >= 0.0))
    return cudaErrorInvalidValue;
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  double* cumulative = carve.take<double>(layout.tokens);
  std::size_t* counts = carve.take<std::size_t>(layout.sequences);
  std::size_t* compacted = options.multi_turn ? carve.take<std::size_t>(layout.tokens) : nullptr;
  if (const detail::call_start start =
          detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  if (layout.sequences == 0) return cudaSuccess;
  CASCADE_RL_CUDA_TRY(
      detail::launch(detail::otb_sequence_kernel<Tuning, T>,
                     detail::blocks_for(layout.sequences, Tuning::thread_item_block_threads),
                     Tuning::thread_item_block_threads, stream, d_token_rewards, d_old_log_probs,
                     d_sum_pi_squared, d_rollout_is_weights, layout, d_advantages, d_returns,
                     cumulative, counts, compacted, report));
  if (groups.groups == 0) return cudaSuccess;
  return detail::launch(detail::otb_group_kernel<Tuning, T>,
                        detail::blocks_for(groups.groups, Tuning::thread_item_block_threads),
                        Tuning::thread_item_block_threads, stream, groups, layout,
                        static_cast<const std::size_t*>(counts),
                        static_cast<const std::size_t*>(compacted),
                        static_cast<const T*>(d_returns), static_cast<const double*>(cumulative),
                        d_advantages, options.epsilon, options.handle_zero_tail, report);
}

}  // namespace cascade_rl::cuda
