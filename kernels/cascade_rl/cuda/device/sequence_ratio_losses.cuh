#pragma once
// The CUB-shaped layer of the sequence-level ratio losses (GSPO, GMPO, sequence SAPO): the
// pre-pass kernel
// (kernel/sequence_ratio_losses.cuh) writes each sequence's quantity into the temporary
// storage, then the token losses' launches (device/token_losses.cuh's
// run_tokens_after_sequence_pass) run the token term (detail/contextual_tokens.hpp) in the
// canonical order. Size query with
// d_temp_storage == nullptr, then the run; the result (loss and metrics: loss_tally) is
// written to d_result in device memory. The temporary storage starts with the
// device_report (report_of) that names non-finite inputs.

#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/contextual_tokens.hpp"
#include "cascade_rl/cuda/detail/token_terms.hpp"
#include "cascade_rl/cuda/device/token_losses.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/sequence_ratio_losses.cuh"
#include "cascade_rl/cuda/kernel/token_losses.cuh"
#include "cascade_rl/options/loss_normalizer.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/sequence_ratio_tokens.hpp"

namespace cascade_rl::cuda {

// d_rollout_is_weights may be null (no weights). d_result: one loss_tally.

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t gspo_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                      const device_token_layout& layout, const T* d_log_probs,
                      const T* d_old_log_probs, const T* d_advantages,
                      const T* d_rollout_is_weights, T* d_grad_out,
                      const loss_normalizer& normalizer, const gspo_options& options,
                      loss_tally* d_result, cudaStream_t stream = nullptr) {
  return detail::run_tokens_after_sequence_pass<Tuning>(
      d_temp_storage, temp_storage_bytes, layout,
      [&](double* means, device_report* report) {
        return detail::launch(detail::sequence_log_ratio_kernel<Tuning, T>,
                              detail::blocks_for(layout.sequences, Tuning::thread_item_block_threads),
                              Tuning::thread_item_block_threads, stream, layout, d_log_probs,
                              d_old_log_probs, means, report);
      },
      [&](const double* means) {
        return detail::gspo_term<T>{d_log_probs, d_old_log_probs, d_advantages,
                                    d_rollout_is_weights, {means, layout, options}};
      },
      d_grad_out, options.aggregation, normalizer, d_result, stream);
}

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t geo_mean_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                          const device_token_layout& layout, const T* d_log_probs,
                          const T* d_old_log_probs, const T* d_advantages,
                          const T* d_rollout_is_weights, T* d_grad_out,
                          const loss_normalizer& normalizer, const geo_mean_options& options,
                          loss_tally* d_result, cudaStream_t stream = nullptr) {
  return detail::run_tokens_after_sequence_pass<Tuning>(
      d_temp_storage, temp_storage_bytes, layout,
      [&](double* losses, device_report* report) {
        return detail::launch(detail::geo_mean_sequence_kernel<Tuning, T>,
                              detail::blocks_for(layout.sequences, Tuning::thread_item_block_threads),
                              Tuning::thread_item_block_threads, stream, layout, d_log_probs,
                              d_old_log_probs, d_advantages, d_rollout_is_weights, options, losses,
                              report);
      },
      [&](const double* losses) {
        return detail::geo_mean_term<T>{d_log_probs, d_old_log_probs, d_advantages,
                                        d_rollout_is_weights, {losses, layout, options}};
      },
      d_grad_out, options.aggregation, normalizer, d_result, stream);
}

// Sequence SAPO: no given weights (the throwing layer refuses them, as the host does).
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t sequence_sapo_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                               const device_token_layout& layout, const T* d_log_probs,
                               const T* d_old_log_probs, const T* d_advantages, T* d_grad_out,
                               const loss_normalizer& normalizer,
                               const sequence_sapo_options& options, loss_tally* d_result,
                               cudaStream_t stream = nullptr) {
  return detail::run_tokens_after_sequence_pass<Tuning, terms::sequence_sapo_row>(
      d_temp_storage, temp_storage_bytes, layout,
      [&](terms::sequence_sapo_row* rows, device_report* report) {
        return detail::launch(detail::sequence_sapo_row_kernel<Tuning, T>,
                              detail::blocks_for(layout.sequences, Tuning::thread_item_block_threads),
                              Tuning::thread_item_block_threads, stream, layout, d_log_probs,
                              d_old_log_probs, d_advantages, options, rows, report);
      },
      [&](const terms::sequence_sapo_row* rows) {
        return detail::sequence_sapo_term<T>{d_log_probs, d_old_log_probs, d_advantages,
                                             nullptr, {{rows, layout}, options}};
      },
      d_grad_out, options.aggregation, normalizer, d_result, stream);
}

}  // namespace cascade_rl::cuda
