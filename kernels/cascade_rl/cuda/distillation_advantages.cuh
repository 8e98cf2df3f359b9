#pragma once
// The MOPD token advantage a_t = log pi_teacher(y_t) - log pi_student(y_t), 0 on masked
// tokens (distillation_advantages.hpp of the host core): one thread per token, the
// subtraction in T as the host core does it, so the same bits.
//
// Three layers, one file each: kernel/distillation_advantages.cuh (the kernel),
// device/distillation_advantages.cuh (CUB's shape: temporary storage, cudaError_t, the
// stream last) and this file, the throwing convenience overload of the host algorithm.

#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/distillation_advantages.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/distillation_advantages.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl {

// The throwing convenience overload; spans in device memory, waits for the stream.
template <std::floating_point T>
void distillation_advantages(exec::cuda_policy policy, const cuda::device_token_layout& tokens,
                             const distillation_inputs<T>& inputs, std::span<T> advantages) {
  const std::span<const T> teacher_logp = inputs.teacher_log_probs;
  const std::span<const T> student_logp = inputs.student_log_probs;
  detail::require_size(teacher_logp.size(), tokens.tokens, "teacher_log_probs", "one per token");
  detail::require_size(student_logp.size(), tokens.tokens, "student_log_probs", "one per token");
  detail::require_size(advantages.size(), tokens.tokens, "advantages", "one per token");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::distillation_advantages(temp, bytes, teacher_logp.data(), student_logp.data(),
                                             tokens, advantages.data(), policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"teacher_log_probs", "student_log_probs"});
}

}  // namespace cascade_rl
