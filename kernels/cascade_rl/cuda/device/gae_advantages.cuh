#pragma once
// The CUB-shaped layer of GAE. Size query with d_temp_storage == nullptr, then the run;
// the temporary storage starts with the device_report (report_of): broken offsets, NaN
// or infinite rewards (first_nonfinite[0]) and values (first_nonfinite[1]) on valid
// tokens, and first_refused = 1 when the batch has a single valid token and the
// whitening uses the unbiased variance. Options the host core refuses return
// cudaErrorInvalidValue.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/reinforce_plus_plus.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/gae_advantages.cuh"
#include "cascade_rl/options/group_estimators.hpp"

namespace cascade_rl::cuda {
namespace detail {

inline bool usable_gae(const gae_options& o) {
  return usable_gamma(o.gamma) && usable_gamma(o.lambda) && usable_whitening(o.whitening);
}

}  // namespace detail

// GAE over the valid tokens: d_advantages whitened (0 on masked tokens), d_returns the
// unwhitened advantage plus the value on every token.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t gae_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes,
                           const T* d_token_rewards, const T* d_values,
                           const device_token_layout& layout, T* d_advantages, T* d_returns,
                           const gae_options& options = {}, cudaStream_t stream = nullptr) {
  if (!detail::usable_gae(options)) return cudaErrorInvalidValue;
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  const detail::whitening_temp w = detail::carve_whitening(carve, layout.tokens);
  if (const detail::call_start start =
          detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  if (layout.sequences > 0) {
    CASCADE_RL_CUDA_TRY(detail::launch(
        detail::gae_kernel<Tuning, T>, detail::blocks_for(layout.sequences, Tuning::thread_item_block_threads),
        Tuning::thread_item_block_threads, stream, d_token_rewards, d_values, layout, d_advantages,
        d_returns, options.gamma, options.gamma * options.lambda, report));
  }
  return detail::launch_whitening<Tuning, T>(layout, d_advantages, d_advantages, options.whitening, w,
                                     report, nullptr, stream);
}

}  // namespace cascade_rl::cuda
