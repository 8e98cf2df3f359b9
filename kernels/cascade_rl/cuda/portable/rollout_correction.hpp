#pragma once
// The rollout correction (algorithms/rollout_correction.hpp) on the portable path: the
// passes of terms/rollout_correction_passes.hpp, one Thrust work item per row.

#include "cascade_rl/algorithms/rollout_correction_metrics.hpp"
#include "cascade_rl/cuda/detail/rollout_correction_terms.hpp"
#include "cascade_rl/cuda/portable/common.hpp"

namespace cascade_rl::cuda::portable {

// The scratch of rollout_correction_passes: rows (doubles), block sums and block extremes
// (doubles) for `tokens` tokens, and one std::size_t per token (row_of).
[[nodiscard]] inline std::size_t rollout_row_scratch(std::size_t rows) {
  return cascade_rl::detail::rollout_row_scratch(rows);
}
[[nodiscard]] inline std::size_t rollout_blocks(std::size_t tokens) {
  return detail::reduce_blocks(tokens);
}
[[nodiscard]] inline std::size_t rollout_block_sum_scratch(std::size_t tokens) {
  return rollout_blocks(tokens) * terms::rollout_channels;
}
[[nodiscard]] inline std::size_t rollout_block_extreme_scratch(std::size_t tokens) {
  return rollout_blocks(tokens) * terms::rollout_extremes;
}

// The rollout correction's passes on the device: weights (the applied ones, not yet
// batch-normalised; null when options.is_level is none) and keep bytes, and the scratch
// rollout_correction_finish reads. Inputs are not validated (the host path does that).
template <class ExecPolicy, class T>
void rollout_correction_passes(ExecPolicy&& exec, const device_token_layout& layout,
                               const T* log_probs, const T* rollout_log_probs,
                               const rollout_correction_options& options, T* weights,
                               std::uint8_t* keep, double* row, std::size_t* row_of,
                               double* block_sums, double* block_extremes) {
  const terms::rollout_correction_params p = cascade_rl::detail::rollout_params_of(options);
  T* const w = options.is_level == rollout_is_level::none ? nullptr : weights;
  detail::for_each_index(
      exec, layout.sequences,
      detail::rollout_prepass_functor<T>{p, layout, log_probs, rollout_log_probs, row});
  detail::for_each_index(exec, layout.sequences,
                         detail::rollout_tokens_functor<T>{p, layout, log_probs, rollout_log_probs,
                                                           row, 1.0, w, keep, row_of});
  detail::for_each_index(exec, rollout_blocks(layout.tokens),
                         detail::rollout_block_functor<T>{p, layout, log_probs, rollout_log_probs,
                                                          row, row_of, block_sums, block_extremes});
}

// The metrics from host copies of the passes' row scratch, block sums and block extremes
// (the block sums added in block order, as the host does); `factor` receives the batch
// normalisation's divisor, 1 when none (then rollout_correction_normalize).
inline rollout_correction_metrics rollout_correction_finish(
    const rollout_correction_options& options, const double* row, std::size_t rows,
    const double* block_sums, const double* block_extremes, std::size_t tokens, double& factor) {
  double totals[terms::rollout_channels] = {};
  double extremes[terms::rollout_extremes];
  for (int c = 0; c < terms::rollout_extremes; c += 2) {
    extremes[c] = -INFINITY;
    extremes[c + 1] = INFINITY;
  }
  for (std::size_t b = 0; b < rollout_blocks(tokens); ++b) {
    for (int c = 0; c < terms::rollout_channels; ++c)
      totals[c] += block_sums[b * terms::rollout_channels + static_cast<std::size_t>(c)];
    terms::rollout_join_extremes(extremes, block_extremes + b * terms::rollout_extremes);
  }
  return cascade_rl::detail::finish_rollout_correction(
      options, cascade_rl::detail::rollout_params_of(options), row, rows, totals, extremes, factor);
}

// Divides the weights by `factor` (rollout_correction_finish's), recomputing them from
// the inputs as the host does.
template <class ExecPolicy, class T>
void rollout_correction_normalize(ExecPolicy&& exec, const device_token_layout& layout,
                                  const T* log_probs, const T* rollout_log_probs,
                                  const rollout_correction_options& options, double factor,
                                  T* weights, std::uint8_t* keep, double* row,
                                  std::size_t* row_of) {
  const terms::rollout_correction_params p = cascade_rl::detail::rollout_params_of(options);
  detail::for_each_index(exec, layout.sequences,
                         detail::rollout_tokens_functor<T>{p, layout, log_probs, rollout_log_probs,
                                                           row, factor, weights, keep, row_of});
}

}  // namespace cascade_rl::cuda::portable
