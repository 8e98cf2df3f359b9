#pragma once
// The CUB-shaped layer of GDPO. Size query with d_temp_storage == nullptr, then the run;
// the temporary storage starts with the device_report (report_of): broken offsets, NaN
// or infinite component scores under nonfinite_rule::error (first_nonfinite[0], the
// index into d_component_scores), refused groups of one (first_singleton) and
// first_refused = 1 for a whitening of a single valid token under the unbiased variance.
// The weights are host values (one per component). Options the host core refuses, or
// layout.sequences != groups.sequences, return cudaErrorInvalidValue.

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/group_advantages.cuh"
#include "cascade_rl/cuda/device/reinforce_plus_plus.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/broadcast.cuh"
#include "cascade_rl/cuda/kernel/gdpo_advantages.cuh"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/group_advantage.hpp"

namespace cascade_rl::cuda {

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t gdpo_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes,
                            const T* d_component_scores, const double* weights,
                            std::size_t components, const device_group_layout& groups,
                            const device_token_layout& layout, T* d_advantages,
                            const gdpo_options& options = {}, cudaStream_t stream = nullptr) {
  bool usable = components > 0 && layout.sequences == groups.sequences &&
                detail::usable_whitening(options.whitening) && options.grpo.epsilon >= 0.0 &&
                ::cuda::std::isfinite(options.grpo.epsilon);
  for (std::size_t k = 0; usable && k < components; ++k) usable = std::isfinite(weights[k]);
  if (!usable) return cudaErrorInvalidValue;
  const std::size_t n = groups.sequences;
  constexpr unsigned threads = Tuning::thread_item_block_threads;
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  T* component = carve.take<T>(n);
  T* per_sequence = carve.take<T>(n);
  double* sum = carve.take<double>(n);
  const detail::whitening_temp w = detail::carve_whitening(carve, layout.tokens);
  if (const detail::call_start start =
          detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  if (options.grpo.nonfinite == nonfinite_rule::error && components * n > 0) {
    CASCADE_RL_CUDA_TRY(detail::launch(detail::gdpo_check_kernel<Tuning, T>,
                                       detail::blocks_for(components * n, threads), threads, stream,
                                       d_component_scores, components * n, report));
  }
  // The group kernel zeroes a non-finite group instead of reporting it again (the check
  // above named it by its index among all components).
  terms::group_params p = cascade_rl::detail::group_params_of(options.grpo);
  p.nonfinite = nonfinite_rule::zero_group;
  for (std::size_t k = 0; k < components; ++k) {
    CASCADE_RL_CUDA_TRY((detail::launch_groups<Tuning, T>(d_component_scores + k * n, groups, component,
                                                 nullptr, nullptr, p, report, stream)));
    if (n > 0) {
      CASCADE_RL_CUDA_TRY(detail::launch(detail::gdpo_combine_kernel<Tuning, T>,
                                         detail::blocks_for(n, threads), threads, stream, static_cast<const T*>(component), n,
                                         weights[k], k == 0, k + 1 == components, sum,
                                         per_sequence));
    }
  }
  if (layout.sequences > 0) {
    CASCADE_RL_CUDA_TRY(
        detail::launch(detail::broadcast_kernel<Tuning, T>,
                       detail::blocks_for(layout.sequences * 32, Tuning::warp_item_block_threads),
                       Tuning::warp_item_block_threads, stream, static_cast<const T*>(per_sequence),
                       layout, d_advantages, report));
  }
  return detail::launch_whitening<Tuning, T>(layout, d_advantages, d_advantages, options.whitening, w,
                                     report, nullptr, stream);
}

}  // namespace cascade_rl::cuda
