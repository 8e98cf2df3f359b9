#pragma once
// The CUB-shaped layer of OPO. Size query with d_temp_storage == nullptr, then the run;
// the temporary storage is the device_report (report_of): broken offsets, NaN or
// infinite scores under nonfinite_rule::error (first_nonfinite[0]) and groups of one
// under singleton_rule::error (first_singleton). layout.sequences must equal
// groups.sequences (else cudaErrorInvalidValue).

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/opo_advantages.cuh"
#include "cascade_rl/options/group_estimators.hpp"

namespace cascade_rl::cuda {

// score_i - (sum |o_j| s_j / sum |o_j|) over the group, on every valid token of i.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t opo_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes, const T* d_scores,
                           const device_group_layout& groups, const device_token_layout& layout,
                           T* d_advantages, const opo_options& options = {},
                           cudaStream_t stream = nullptr) {
  if (layout.sequences != groups.sequences) return cudaErrorInvalidValue;
  return detail::report_call_per_item<Tuning>(d_temp_storage, temp_storage_bytes, stream,
                                              groups.groups, detail::opo_kernel<Tuning, T>,
                                              d_scores, groups, layout, d_advantages, options);
}

}  // namespace cascade_rl::cuda
