#pragma once
// The CUB-shaped layer of GRPO pass@k. Size query with d_temp_storage == nullptr, then
// the run; the temporary storage is the device_report (report_of): broken offsets, NaN
// or infinite scores under nonfinite_rule::error (first_nonfinite[0]) and groups of one
// under singleton_rule::error (first_singleton). Options the host core refuses return
// cudaErrorInvalidValue.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/grpo_passk_advantages.cuh"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/passk_advantage.hpp"

namespace cascade_rl::cuda {
namespace detail {

inline bool usable_passk(const grpo_passk_options& o) {
  return o.epsilon >= 0.0 && ::cuda::std::isfinite(o.epsilon) &&
         o.singleton != singleton_rule::raw_score &&
         o.accumulation != mean_accumulation::float32_rounded_sum;
}

}  // namespace detail

// The best sequence of each group: (r_max - r_second) [/ (std + eps)]; the others 0.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t grpo_passk_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                  const T* d_scores, const device_group_layout& groups,
                                  T* d_advantages, const grpo_passk_options& options = {},
                                  cudaStream_t stream = nullptr) {
  if (!detail::usable_passk(options)) return cudaErrorInvalidValue;
  return detail::report_call_per_item<Tuning>(d_temp_storage, temp_storage_bytes, stream,
                                              groups.groups, detail::grpo_passk_kernel<Tuning, T>,
                                              d_scores, groups, d_advantages, options);
}

}  // namespace cascade_rl::cuda
