#pragma once
// The CUB-shaped layer of REINFORCE++ and REINFORCE++-baseline and of their building
// blocks, discounted_returns and masked_whiten. Size query with d_temp_storage ==
// nullptr, then the run; the temporary storage starts with the device_report
// (report_of): broken offsets, NaN or infinite inputs (first_nonfinite[0]), refused
// groups of one, and first_refused = 1 when the batch has a single valid token and the
// whitening uses the unbiased variance. Options the host core refuses return
// cudaErrorInvalidValue.

#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/group_advantages.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/broadcast.cuh"
#include "cascade_rl/cuda/kernel/reinforce_plus_plus.cuh"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/group_advantage.hpp"

namespace cascade_rl::cuda {
namespace detail {

// The temporary storage of a whitening, carved after the report.
struct whitening_temp {
  count_sum* sums;
  double* squares;
  whitening_state* state;
};

inline whitening_temp carve_whitening(temp_carver& carve, std::size_t tokens) {
  const std::size_t blocks = (tokens + canonical_block - 1) / canonical_block;
  whitening_temp w;
  w.sums = carve.take<count_sum>(blocks);
  w.squares = carve.take<double>(blocks);
  w.state = carve.take<whitening_state>(1);
  return w;
}

// nonfinite_slot: where to report NaN or infinite values (null: not checked).
template <class Tuning, class T>
cudaError_t launch_whitening(const device_token_layout& layout, const T* values, T* out,
                             const whitening_options& p, const whitening_temp& w,
                             device_report* report, unsigned long long* nonfinite_slot,
                             cudaStream_t stream) {
  const std::size_t blocks = (layout.tokens + canonical_block - 1) / canonical_block;
  const auto tiles = static_cast<unsigned>((blocks + token_warps<Tuning> - 1) / token_warps<Tuning>);
  constexpr unsigned warp_threads = Tuning::warp_item_block_threads;
  if (tiles > 0) {
    CASCADE_RL_CUDA_TRY(launch(whiten_sum_kernel<Tuning, T>, tiles, warp_threads, stream, layout, values,
                               w.sums, nonfinite_slot));
  }
  CASCADE_RL_CUDA_TRY(
      launch(whiten_mean_kernel<>, 1, combine_block_threads, stream, w.sums, blocks, p, w.state, report));
  if (tiles == 0) return cudaSuccess;
  CASCADE_RL_CUDA_TRY(launch(whiten_squares_kernel<Tuning, T>, tiles, warp_threads, stream, layout, values,
                             w.state, p.accumulation, w.squares));
  CASCADE_RL_CUDA_TRY(
      launch(whiten_scale_kernel<>, 1, combine_block_threads, stream, w.squares, blocks, p, w.state));
  constexpr unsigned threads = Tuning::thread_item_block_threads;
  return launch(whiten_apply_kernel<Tuning, T>, blocks_for(layout.tokens, threads), threads, stream, layout,
                values, out, w.state, p);
}

// Options the host core refuses (require_whitening_options): the CUB layer returns
// cudaErrorInvalidValue for them.
inline bool usable_whitening(const whitening_options& o) {
  return o.epsilon >= 0.0 && ::cuda::std::isfinite(o.epsilon) &&
         o.accumulation != mean_accumulation::float32_sequential;
}
inline bool usable_gamma(double gamma) { return gamma >= 0.0 && gamma <= 1.0; }

template <class Tuning, class T>
cudaError_t launch_returns(const T* rewards, const device_token_layout& layout, T* returns,
                           double gamma, masked_token_return masked, device_report* report,
                           cudaStream_t stream) {
  if (layout.sequences == 0) return cudaSuccess;
  constexpr unsigned threads = Tuning::thread_item_block_threads;
  return launch(discounted_returns_kernel<Tuning, T>, blocks_for(layout.sequences, threads), threads, stream,
                rewards, layout, returns, gamma, masked, report);
}

}  // namespace detail

// Batch whitening of d_values over the valid tokens, 0 on masked tokens; d_whitened may
// be d_values. Reports NaN or infinite valid values in first_nonfinite[0].
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t masked_whiten(void* d_temp_storage, std::size_t& temp_storage_bytes, const T* d_values,
                          const device_token_layout& layout, T* d_whitened,
                          const whitening_options& options = {}, cudaStream_t stream = nullptr) {
  if (!detail::usable_whitening(options)) return cudaErrorInvalidValue;
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  const detail::whitening_temp w = detail::carve_whitening(carve, layout.tokens);
  if (const detail::call_start start = detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  return detail::launch_whitening<Tuning>(layout, d_values, d_whitened, options, w,
                                  report, &report->first_nonfinite[0], stream);
}

// ret_t = r_t + gamma * run backwards within each sequence, a masked token carrying run
// across or cutting it (`masked`, terms/discounted_return.hpp).
// Reports NaN or infinite rewards on valid tokens in first_nonfinite[0].
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t discounted_returns(void* d_temp_storage, std::size_t& temp_storage_bytes,
                               const T* d_token_rewards, const device_token_layout& layout,
                               T* d_returns, double gamma = 1.0,
                               masked_token_return masked = masked_token_return::carry,
                               cudaStream_t stream = nullptr) {
  if (!detail::usable_gamma(gamma)) return cudaErrorInvalidValue;
  device_report* report = nullptr;
  if (const detail::call_start start = detail::begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  return detail::launch_returns<Tuning>(d_token_rewards, layout, d_returns, gamma, masked, report, stream);
}

// Discounted returns of d_token_rewards written to d_advantages, whitened there.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t reinforce_plus_plus_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                           const T* d_token_rewards, const device_token_layout& layout,
                                           T* d_advantages,
                                           const reinforce_plus_plus_options& options = {},
                                           cudaStream_t stream = nullptr) {
  if (!detail::usable_whitening(options.whitening) || !detail::usable_gamma(options.gamma))
    return cudaErrorInvalidValue;
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  const detail::whitening_temp w = detail::carve_whitening(carve, layout.tokens);
  if (const detail::call_start start = detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  CASCADE_RL_CUDA_TRY(detail::launch_returns<Tuning>(d_token_rewards, layout, d_advantages, options.gamma,
                                             options.masked, report, stream));
  return detail::launch_whitening<Tuning, T>(layout, d_advantages, d_advantages,
                                     options.whitening, w, report, nullptr, stream);
}

// score_i - mean_g(score) on every valid token of sequence i, whitened over the batch.
// layout.sequences must equal groups.sequences. Reports NaN or infinite scores (under
// nonfinite_rule::error) and refused groups of one.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t reinforce_plus_plus_baseline_advantages(
    void* d_temp_storage, std::size_t& temp_storage_bytes, const T* d_scores,
    const device_group_layout& groups, const device_token_layout& layout, T* d_advantages,
    const reinforce_plus_plus_baseline_options& options = {}, cudaStream_t stream = nullptr) {
  if (!detail::usable_whitening(options.whitening) || layout.sequences != groups.sequences)
    return cudaErrorInvalidValue;
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  T* per_sequence = carve.take<T>(groups.sequences);
  const detail::whitening_temp w = detail::carve_whitening(carve, layout.tokens);
  if (const detail::call_start start = detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  CASCADE_RL_CUDA_TRY((detail::launch_groups<Tuning, T>(d_scores, groups, per_sequence, nullptr, nullptr,
                                               detail::group_params_of(options), report, stream)));
  if (layout.sequences > 0) {
    constexpr unsigned threads = Tuning::warp_item_block_threads;
    CASCADE_RL_CUDA_TRY(detail::launch(detail::broadcast_kernel<Tuning, T>,
                                       detail::blocks_for(layout.sequences * 32, threads), threads, stream,
                                       per_sequence, layout, d_advantages, report));
  }
  return detail::launch_whitening<Tuning, T>(layout, d_advantages, d_advantages,
                                     options.whitening, w, report, nullptr, stream);
}

}  // namespace cascade_rl::cuda
