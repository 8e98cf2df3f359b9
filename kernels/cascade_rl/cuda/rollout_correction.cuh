#pragma once
// The rollout correction (veRL's rollout_corr_helper) on the GPU, the throwing
// convenience layer over device/rollout_correction.cuh. Spans point to device memory; the
// call waits for its stream. The passes run on the device; the row scratch, the block
// sums and the extremes come back to the host, which finishes the metrics with the host
// core's code (the same bits as exec::seq), then the weights are batch-normalised on the
// device when asked. A NaN or infinite valid log-prob is refused as the host refuses it
// (argument and first index).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/rollout_correction.hpp"
#include "cascade_rl/cuda/device/rollout_correction.cuh"
#include "cascade_rl/cuda/token_losses.cuh"

namespace cascade_rl {

template <std::floating_point T>
rollout_correction_metrics rollout_correction(exec::cuda_policy policy,
                                              const cuda::device_token_layout& layout,
                                              const rollout_correction_inputs<T>& inputs,
                                              std::span<T> is_weights_out,
                                              std::span<std::uint8_t> keep_out,
                                              const rollout_correction_options& options) {
  detail::validate_rollout_correction_options(options);
  cuda::detail::require_tokens(inputs.log_probs.size(), layout, "log_probs");
  cuda::detail::require_tokens(inputs.rollout_log_probs.size(), layout, "rollout_log_probs");
  cuda::detail::require_tokens(keep_out.size(), layout, "keep_out");
  const bool weighted = options.is_level != rollout_is_level::none;
  if (weighted) cuda::detail::require_tokens(is_weights_out.size(), layout, "is_weights_out");
  T* const weights = weighted ? is_weights_out.data() : nullptr;
  const cudaStream_t stream = policy.stream;
  std::size_t bytes = 0;
  cuda::check(cuda::rollout_correction_passes(nullptr, bytes, layout, inputs.log_probs.data(),
                                              inputs.rollout_log_probs.data(), options, weights,
                                              keep_out.data(), stream),
              "size query");
  cuda::detail::device_buffer temp(bytes, stream);
  cuda::check(cuda::rollout_correction_passes(temp.data(), bytes, layout, inputs.log_probs.data(),
                                              inputs.rollout_log_probs.data(), options, weights,
                                              keep_out.data(), stream),
              "kernel launch");
  const cuda::rollout_correction_scratch s =
      cuda::rollout_correction_scratch_of(temp.data(), layout);
  std::vector<double> row(detail::rollout_row_scratch(s.rows));
  std::vector<double> block_sums(s.blocks * terms::rollout_channels);
  std::vector<double> block_extremes(s.blocks * terms::rollout_extremes);
  const auto copy = [&](std::vector<double>& host, const double* device) {
    if (!host.empty())
      cuda::check(cudaMemcpyAsync(host.data(), device, host.size() * sizeof(double),
                                  cudaMemcpyDeviceToHost, stream),
                  "cudaMemcpyAsync");
  };
  const cuda::device_report report = cuda::detail::copy_to_host(s.report, stream);
  const char* const arguments[] = {"log_probs", "rollout_log_probs"};
  cuda::detail::throw_if_reported(report, arguments);
  copy(row, s.row);
  copy(block_sums, s.block_sums);
  copy(block_extremes, s.block_extremes);
  cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  double totals[terms::rollout_channels] = {};
  double extremes[terms::rollout_extremes];
  for (int c = 0; c < terms::rollout_extremes; c += 2) {
    extremes[c] = -INFINITY;
    extremes[c + 1] = INFINITY;
  }
  for (std::size_t b = 0; b < s.blocks; ++b) {
    for (int c = 0; c < terms::rollout_channels; ++c)
      totals[c] += block_sums[b * terms::rollout_channels + static_cast<std::size_t>(c)];
    terms::rollout_join_extremes(extremes, block_extremes.data() + b * terms::rollout_extremes);
  }
  double factor = 1.0;
  const rollout_correction_metrics metrics = detail::finish_rollout_correction(
      options, detail::rollout_params_of(options), row.data(), s.rows, totals, extremes, factor);
  if (weighted && factor != 1.0) {
    cuda::check(cuda::rollout_correction_normalize(temp.data(), layout, inputs.log_probs.data(),
                                                   inputs.rollout_log_probs.data(), options, factor,
                                                   weights, keep_out.data(), stream),
                "kernel launch");
    cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  return metrics;
}

}  // namespace cascade_rl
