#pragma once
// The CUB-shaped layer of log_probs_from_logits: size query with d_temp_storage ==
// nullptr, then the run; the temporary storage holds the device_report (report_of),
// whose first_bad_label names the first row with a label outside [0, vocab).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/log_probs.cuh"

namespace cascade_rl::cuda {

// logits: rows of `vocab` values (float or __nv_bfloat16), row r at d_logits + r *
// row_stride. Writes d_log_probs[r] = log softmax(logits[r] / temperature)[labels[r]]
// (NaN and a report entry for a label outside [0, vocab)) and, when d_entropy is not
// null, the entropy of that softmax. Temporary storage: the device_report.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t log_probs_from_logits(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                  const T* d_logits, std::size_t rows, std::size_t vocab,
                                  std::size_t row_stride, const std::int64_t* d_labels,
                                  float* d_log_probs, float* d_entropy, float temperature = 1.0f,
                                  cudaStream_t stream = nullptr) {
  device_report* report = nullptr;
  if (const detail::call_start start = detail::begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  if (!(temperature > 0) || vocab == 0 || row_stride < vocab) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const float inverse = 1.0f / temperature;
  return detail::launch(detail::log_probs_kernel<Tuning, T>,
                        detail::blocks_for(rows, detail::rows_per_block<Tuning>),
                        Tuning::logits_block_threads, stream, d_logits, rows, vocab, row_stride, d_labels,
                        inverse, d_log_probs, d_entropy, report);
}

// The backward pass: d_grad_logits[r * row_stride + v] = dL/dlogits for the seeds
// d_log_prob_seeds[r] = dL/dlogp and d_entropy_seeds[r] = dL/dH (null: 0). The report
// names a non-finite seed (first_nonfinite[0] and [1]) and a label outside [0, vocab).
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t log_probs_backward(void* d_temp_storage, std::size_t& temp_storage_bytes,
                               const T* d_logits, std::size_t rows, std::size_t vocab,
                               std::size_t row_stride, const std::int64_t* d_labels,
                               const float* d_log_prob_seeds, const float* d_entropy_seeds,
                               float* d_grad_logits, float temperature = 1.0f,
                               cudaStream_t stream = nullptr) {
  device_report* report = nullptr;
  if (const detail::call_start start =
          detail::begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  if (!(temperature > 0) || vocab == 0 || row_stride < vocab) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  return detail::launch(
      detail::log_probs_backward_kernel<Tuning, T>, detail::blocks_for(rows, detail::rows_per_block<Tuning>),
      Tuning::logits_block_threads, stream, d_logits, rows, vocab, row_stride, d_labels,
      d_log_prob_seeds, d_entropy_seeds, 1.0f / temperature, d_grad_logits, report);
}

}  // namespace cascade_rl::cuda
