#pragma once
// The MOPD token advantage a_t = log pi_teacher(y_t) - log pi_student(y_t), 0 on masked
// tokens (distillation_advantages.hpp of the host core): one thread per token, the
// subtraction in T as the host core does it, so the same bits.
//
// CUB's shape: size query with d_temp_storage == nullptr, then the run. The temporary
// storage holds the device_report (report_of): first_nonfinite[0] and [1] name the
// first valid token whose teacher or student log-prob is NaN or infinite.

#include <cuda_runtime.h>

#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/distillation_advantages.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/group_advantages.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl::cuda {
namespace detail {

template <class T>
__global__ void __launch_bounds__(256)
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

}  // namespace detail

template <class T>
cudaError_t distillation_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                    const T* d_teacher_logp, const T* d_student_logp,
                                    const device_token_layout& layout, T* d_advantages,
                                    cudaStream_t stream = nullptr) {
  device_report* report = nullptr;
  if (const detail::call_start start = detail::begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  if (layout.tokens == 0) return cudaSuccess;
  return detail::launch(detail::distillation_kernel<T>, detail::blocks_for(layout.tokens, 256), 256, stream,
                        d_teacher_logp, d_student_logp, layout, d_advantages, report);
}

}  // namespace cascade_rl::cuda

namespace cascade_rl {

// The throwing convenience overload; spans in device memory, waits for the stream.
template <std::floating_point T>
void distillation_advantages(exec::cuda_policy policy, std::span<const T> teacher_logp,
                             std::span<const T> student_logp, const cuda::device_token_layout& tokens,
                             std::span<T> advantages) {
  detail::require_size(teacher_logp.size(), tokens.tokens, "teacher_logp", "one per token");
  detail::require_size(student_logp.size(), tokens.tokens, "student_logp", "one per token");
  detail::require_size(advantages.size(), tokens.tokens, "advantages", "one per token");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::distillation_advantages(temp, bytes, teacher_logp.data(), student_logp.data(),
                                             tokens, advantages.data(), policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"teacher_logp", "student_logp"});
}

}  // namespace cascade_rl
