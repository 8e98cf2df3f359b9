#pragma once
// The CUB-shaped layer of distillation_advantages: size query with d_temp_storage ==
// nullptr, then the run. The temporary storage holds the device_report (report_of):
// first_nonfinite[0] and [1] name the first valid token whose teacher or student
// log-prob is NaN or infinite.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/distillation_advantages.cuh"

namespace cascade_rl::cuda {

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t distillation_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                    const T* d_teacher_logp, const T* d_student_logp,
                                    const device_token_layout& layout, T* d_advantages,
                                    cudaStream_t stream = nullptr) {
  return detail::report_call_per_item<Tuning>(d_temp_storage, temp_storage_bytes, stream,
                                              layout.tokens, detail::distillation_kernel<Tuning, T>,
                                              d_teacher_logp, d_student_logp, layout, d_advantages);
}

}  // namespace cascade_rl::cuda
