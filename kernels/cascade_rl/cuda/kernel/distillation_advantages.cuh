#pragma once
// The MOPD token-advantage kernel (device/distillation_advantages.cuh launches it): one
// thread per token.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/device_layout.hpp"

namespace cascade_rl::cuda::detail {

template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
distillation_kernel(const T* __restrict__ teacher, const T* __restrict__ student,
                    device_token_layout layout, T* __restrict__ advantages, device_report* report) {
  const std::size_t t = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= layout.tokens) return;
  const bool valid = layout.valid(t);
  if (valid) {
    if (!::cuda::std::isfinite(teacher[t])) report_nonfinite(&report->first_nonfinite[0], t, teacher[t]);
    if (!::cuda::std::isfinite(student[t])) report_nonfinite(&report->first_nonfinite[1], t, student[t]);
  }
  advantages[t] = distillation_advantage(teacher[t], student[t], valid);
}

}  // namespace cascade_rl::cuda::detail
