#pragma once
// The CUB-shaped layer of the sequence-level ratio losses (GSPO): the pre-pass kernel
// (kernel/sequence_ratio_losses.cuh) writes each sequence's quantity into the temporary
// storage, then the token losses' kernels (kernel/token_losses.cuh) run the token term
// (detail/sequence_ratio_terms.hpp) in the canonical order. Size query with
// d_temp_storage == nullptr, then the run; the result (loss and metrics: loss_tally) is
// written to d_result in device memory. The temporary storage starts with the
// device_report (report_of) that names non-finite inputs.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/algorithms/loss_counts.hpp"
#include "cascade_rl/algorithms/policy_loss_options.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/sequence_ratio_terms.hpp"
#include "cascade_rl/cuda/detail/token_terms.hpp"
#include "cascade_rl/cuda/device/token_losses.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/kernel/sequence_ratio_losses.cuh"
#include "cascade_rl/cuda/kernel/token_losses.cuh"

namespace cascade_rl::cuda {

// d_rollout_is_weights may be null (no weights). d_result: one loss_tally.
template <class T>
cudaError_t gspo_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                      const device_token_layout& layout, const T* d_log_probs,
                      const T* d_old_log_probs, const T* d_advantages,
                      const T* d_rollout_is_weights, T* d_grad_out,
                      const loss_normalizer& normalizer, const gspo_options& options,
                      loss_tally* d_result, cudaStream_t stream = nullptr) {
  const loss_aggregation mode = options.aggregation;
  const bool per_sequence = mode == loss_aggregation::seq_mean_token_mean;
  const std::size_t blocks =
      (layout.tokens + detail::canonical_block - 1) / detail::canonical_block;
  const std::size_t tiles = (blocks + detail::token_warps - 1) / detail::token_warps;
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  loss_tally* partials = carve.take<loss_tally>(blocks);
  unsigned long long* valid = carve.take<unsigned long long>(per_sequence ? layout.sequences : 0);
  double* sequence_log_ratio = carve.take<double>(layout.sequences);
  if (const detail::call_start start =
          detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  if (layout.sequences > 0) {
    CASCADE_RL_CUDA_TRY(
        detail::launch(detail::sequence_log_ratio_kernel<T>,
                       detail::blocks_for(layout.sequences, detail::sequence_ratio_threads),
                       detail::sequence_ratio_threads, stream, layout, d_log_probs, d_old_log_probs,
                       sequence_log_ratio, report));
  }
  if (per_sequence && layout.sequences > 0) {
    CASCADE_RL_CUDA_TRY(detail::launch(detail::sequence_valid_kernel<>,
                                       detail::blocks_for(layout.sequences * 32, 256), 256, stream,
                                       layout, valid, report));
  }
  const detail::gspo_term<T> term{d_log_probs,
                                  d_old_log_probs,
                                  d_advantages,
                                  d_rollout_is_weights,
                                  sequence_log_ratio,
                                  layout,
                                  cascade_rl::detail::gspo_params_of(options)};
  if (tiles > 0) {
    CASCADE_RL_CUDA_TRY(detail::launch(detail::token_loss_kernel<T, detail::gspo_term<T>>,
                                       static_cast<unsigned>(tiles), detail::token_threads, stream,
                                       layout, term, d_grad_out, mode, normalizer,
                                       per_sequence ? valid : nullptr, partials, report));
  }
  return detail::launch(detail::combine_tallies_kernel<>, 1, 32, stream, partials, blocks,
                        d_result);
}

}  // namespace cascade_rl::cuda
