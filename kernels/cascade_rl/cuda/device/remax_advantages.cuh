#pragma once
// The CUB-shaped layer of ReMax. Size query with d_temp_storage == nullptr, then the run;
// the temporary storage is the device_report (report_of): broken offsets, NaN or
// infinite rewards on valid tokens (first_nonfinite[0]) and baselines (first_nonfinite[1]).

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/remax_advantages.cuh"

namespace cascade_rl::cuda {

// d_advantages: return - baseline on valid tokens, 0 on masked ones; d_returns: the
// reward-to-go over the valid tokens, on every token. d_reward_baselines: one per sequence.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t remax_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes,
                             const T* d_token_rewards, const T* d_reward_baselines,
                             const device_token_layout& layout, T* d_advantages, T* d_returns,
                             cudaStream_t stream = nullptr) {
  return detail::report_call_per_item<Tuning>(d_temp_storage, temp_storage_bytes, stream,
                                              layout.sequences, detail::remax_kernel<Tuning, T>,
                                              d_token_rewards, d_reward_baselines, layout,
                                              d_advantages, d_returns);
}

}  // namespace cascade_rl::cuda
