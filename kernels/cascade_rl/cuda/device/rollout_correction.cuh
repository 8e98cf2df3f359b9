#pragma once
// The CUB-shaped layer of the rollout correction: the passes into the temporary storage
// (the report, the row scratch, each token's row, the block sums and extremes), the
// scratch's place in it for the caller's copy to the host (where
// portable::rollout_correction_finish-like code finishes the metrics:
// detail::finish_rollout_correction), and the weights' batch normalisation. Size query
// with d_temp_storage == nullptr, then the run.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/rollout_correction_terms.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/rollout_correction.cuh"
#include "cascade_rl/options/rollout_correction.hpp"
#include "cascade_rl/terms/rollout_correction_passes.hpp"

namespace cascade_rl::cuda {

// Where the passes leave their results in the temporary storage.
struct rollout_correction_scratch {
  device_report* report = nullptr;
  double* row = nullptr;             // (rollout_row_fields + criteria max) x rows
  std::size_t* row_of = nullptr;     // one per token
  double* block_sums = nullptr;      // rollout_channels per canonical block
  double* block_extremes = nullptr;  // rollout_extremes per canonical block
  std::size_t rows = 0, blocks = 0;
};

namespace detail {

inline rollout_correction_scratch carve_rollout_correction(temp_carver& carve,
                                                           const device_token_layout& layout) {
  rollout_correction_scratch s;
  s.rows = layout.sequences;
  s.blocks = (layout.tokens + cascade_rl::detail::reduce_block_size - 1) /
             cascade_rl::detail::reduce_block_size;
  s.report = carve.take<device_report>(1);
  s.row = carve.take<double>(
      static_cast<std::size_t>(terms::rollout_row_fields + terms::rollout_criteria_max) * s.rows);
  s.row_of = carve.take<std::size_t>(layout.tokens);
  s.block_sums = carve.take<double>(s.blocks * terms::rollout_channels);
  s.block_extremes = carve.take<double>(s.blocks * terms::rollout_extremes);
  return s;
}

}  // namespace detail

// The scratch's place in temporary storage of a run of rollout_correction_passes.
inline rollout_correction_scratch rollout_correction_scratch_of(void* d_temp_storage,
                                                                const device_token_layout& layout) {
  detail::temp_carver carve(d_temp_storage);
  return detail::carve_rollout_correction(carve, layout);
}

// The passes: d_weights (null when options.is_level is none) the applied weights before
// batch normalisation, d_keep the effective mask, and the scratch; the first NaN or
// infinite valid value of d_log_probs / d_rollout_log_probs in the report's
// first_nonfinite[0] / [1] (the results are then meaningless).
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t rollout_correction_passes(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                      const device_token_layout& layout, const T* d_log_probs,
                                      const T* d_rollout_log_probs,
                                      const rollout_correction_options& options, T* d_weights,
                                      std::uint8_t* d_keep, cudaStream_t stream = nullptr) {
  detail::temp_carver carve(d_temp_storage);
  const rollout_correction_scratch s = detail::carve_rollout_correction(carve, layout);
  if (const detail::call_start start =
          detail::begin_call(d_temp_storage, temp_storage_bytes, carve, s.report, stream);
      !start.proceed)
    return start.status;
  const terms::rollout_correction_params p = cascade_rl::detail::rollout_params_of(options);
  constexpr unsigned row_threads = Tuning::rollout_row_block_threads;
  T* const weights = options.is_level == rollout_is_level::none ? nullptr : d_weights;
  if (layout.tokens > 0)
    CASCADE_RL_CUDA_TRY(detail::launch(detail::rollout_check_kernel<Tuning, T>,
                                       detail::blocks_for(layout.tokens, Tuning::thread_item_block_threads),
                                       Tuning::thread_item_block_threads, stream,
                                       d_log_probs, d_rollout_log_probs, layout, s.report));
  if (s.rows > 0) {
    const detail::rollout_prepass_functor<T> prepass{p, layout, d_log_probs, d_rollout_log_probs,
                                                     s.row};
    CASCADE_RL_CUDA_TRY(detail::launch(detail::for_each_kernel<decltype(prepass)>,
                                       detail::blocks_for(s.rows, row_threads), row_threads, stream,
                                       s.rows, prepass));
    const detail::rollout_tokens_functor<T> tokens{
        p, layout, d_log_probs, d_rollout_log_probs, s.row, 1.0, weights, d_keep, s.row_of};
    CASCADE_RL_CUDA_TRY(detail::launch(detail::for_each_kernel<decltype(tokens)>,
                                       detail::blocks_for(s.rows, row_threads), row_threads, stream,
                                       s.rows, tokens));
  }
  if (s.blocks == 0) return cudaSuccess;
  const detail::rollout_block_functor<T> block{p,     layout,   d_log_probs,  d_rollout_log_probs,
                                               s.row, s.row_of, s.block_sums, s.block_extremes};
  constexpr unsigned sum_threads = Tuning::rollout_sum_block_threads;
  return detail::launch(detail::for_each_kernel<decltype(block)>, detail::blocks_for(s.blocks, sum_threads),
                        sum_threads, stream, s.blocks, block);
}

// Divides the weights by `factor` after a run of rollout_correction_passes in the same
// temporary storage (the token pass again, the weights recomputed as the host does).
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t rollout_correction_normalize(void* d_temp_storage, const device_token_layout& layout,
                                         const T* d_log_probs, const T* d_rollout_log_probs,
                                         const rollout_correction_options& options, double factor,
                                         T* d_weights, std::uint8_t* d_keep,
                                         cudaStream_t stream = nullptr) {
  const rollout_correction_scratch s = rollout_correction_scratch_of(d_temp_storage, layout);
  if (s.rows == 0) return cudaSuccess;
  const detail::rollout_tokens_functor<T> tokens{cascade_rl::detail::rollout_params_of(options),
                                                 layout,
                                                 d_log_probs,
                                                 d_rollout_log_probs,
                                                 s.row,
                                                 factor,
                                                 d_weights,
                                                 d_keep,
                                                 s.row_of};
  constexpr unsigned row_threads = Tuning::rollout_row_block_threads;
  return detail::launch(detail::for_each_kernel<decltype(tokens)>, detail::blocks_for(s.rows, row_threads),
                        row_threads, stream, s.rows, tokens);
}

}  // namespace cascade_rl::cuda
