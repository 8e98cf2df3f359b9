#pragma once
// The CUB-shaped layer of the covariance-selection losses (Clip-Cov, KL-Cov): the
// selections (the block sums, their totals, the keys, cub::DeviceRadixSort::SortPairs, the
// marking), the check of a given mask against the layout, and the losses over a selection
// mask (one byte per token, non-zero: selected).
// Size query with d_temp_storage == nullptr, then the run; the temporary storage starts
// with the device_report (report_of).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "cascade_rl/cuda/detail/covariance_terms.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/token_losses.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/covariance_losses.cuh"
#include "cascade_rl/options/policy_losses.hpp"

namespace cascade_rl::cuda {

namespace detail {

// Both selections (detail/covariance_terms.hpp's steps): the block sums and their totals,
// keys_of(totals, keys, indices) per token, every token sorted by key with CUB's stable
// radix sort (so the order is (key, index)), the first selection_count(ratio, valid) keyed
// tokens marked in d_selected (zeroed first).
template <class Tuning, class T, class KeysOf>
cudaError_t run_covariance_selection(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                     const device_token_layout& layout, const T* d_log_probs,
                                     const T* d_advantages, double ratio, std::uint8_t* d_selected,
                                     cudaStream_t stream, const KeysOf& keys_of) {
  const std::size_t n = layout.tokens;
  const std::size_t blocks =
      (n + cascade_rl::detail::reduce_block_size - 1) / cascade_rl::detail::reduce_block_size;
  std::size_t sort_bytes = 0;
  CASCADE_RL_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const std::uint64_t*>(nullptr),
      static_cast<std::uint64_t*>(nullptr), static_cast<const std::size_t*>(nullptr),
      static_cast<std::size_t*>(nullptr), static_cast<int>(n), 0, 64, stream));
  temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  double* sums = carve.take<double>(covariance_sum_entries(n));
  std::uint64_t* keys = carve.take<std::uint64_t>(n);
  std::uint64_t* sorted_keys = carve.take<std::uint64_t>(n);
  std::size_t* indices = carve.take<std::size_t>(n);
  std::size_t* sorted_indices = carve.take<std::size_t>(n);
  void* cub_temp = carve.take<unsigned char>(sort_bytes);
  if (const call_start start =
          begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  if (n == 0) return cudaSuccess;
  CASCADE_RL_CUDA_TRY(cudaMemsetAsync(d_selected, 0, n, stream));
  constexpr unsigned warp_threads = Tuning::warp_item_block_threads;
  constexpr unsigned threads = Tuning::thread_item_block_threads;
  CASCADE_RL_CUDA_TRY(launch(covariance_block_sums_kernel<T, Tuning>, blocks_for(blocks * 32, warp_threads),
                             warp_threads, stream, layout, d_advantages, d_log_probs, sums, blocks));
  // The totals: one item on one thread (the block sums joined in block order), not tunable.
  const covariance_combine_functor combine{sums, blocks};
  CASCADE_RL_CUDA_TRY(
      launch(for_each_kernel<decltype(combine)>, 1, 1, stream, std::size_t{1}, combine));
  const double* totals = sums + 3 * blocks;
  const auto key = keys_of(totals, keys, indices);
  CASCADE_RL_CUDA_TRY(
      launch(for_each_kernel<decltype(key)>, blocks_for(n, threads), threads, stream, n, key));
  CASCADE_RL_CUDA_TRY(cub::DeviceRadixSort::SortPairs(cub_temp, sort_bytes, keys, sorted_keys,
                                                      indices, sorted_indices, static_cast<int>(n),
                                                      0, 64, stream));
  const mark_selected_functor mark{sorted_keys, sorted_indices, totals, ratio, d_selected};
  return launch(for_each_kernel<decltype(mark)>, blocks_for(n, threads), threads, stream, n, mark);
}

}  // namespace detail

// Our seeded Clip-Cov draw (token_selection::seeded of the host core, the same tokens):
// d_selected[t] = 1 on the selected tokens, 0 elsewhere. Every token is sorted by its key
// (non-candidates last) with CUB's stable radix sort, so the order is (key, index).
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t clip_cov_seeded_selection(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                      const device_token_layout& layout, const T* d_log_probs,
                                      const T* d_old_log_probs, const T* d_advantages,
                                      std::uint64_t seed, const clip_cov_options& options,
                                      std::uint8_t* d_selected, cudaStream_t stream = nullptr) {
  return detail::run_covariance_selection<Tuning>(
      d_temp_storage, temp_storage_bytes, layout, d_log_probs, d_advantages, options.clip_cov_ratio,
      d_selected, stream, [&](const double* totals, std::uint64_t* keys, std::size_t* indices) {
        return detail::clip_cov_keys_functor<T>{layout,       d_log_probs, d_old_log_probs,
                                                d_advantages, totals,      seed,
                                                options,      keys,        indices};
      });
}

// KL-Cov's selection (kl_cov_selection of the host core, the same tokens): d_selected[t] =
// 1 on the k valid tokens of largest cov (ties to the smaller index), 0 elsewhere.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t kl_cov_selection(void* d_temp_storage, std::size_t& temp_storage_bytes,
                             const device_token_layout& layout, const T* d_log_probs,
                             const T* d_advantages, const kl_cov_options& options,
                             std::uint8_t* d_selected, cudaStream_t stream = nullptr) {
  return detail::run_covariance_selection<Tuning>(
      d_temp_storage, temp_storage_bytes, layout, d_log_probs, d_advantages, options.kl_cov_ratio,
      d_selected, stream, [&](const double* totals, std::uint64_t* keys, std::size_t* indices) {
        return detail::kl_cov_keys_functor<T>{layout, d_log_probs, d_advantages,
                                              totals, keys,        indices};
      });
}

// The first token a selection mask selects that the layout leaves out, into the report's
// first_refused (none when every selected token is valid). Temporary storage: the report.
template <tuning_policy Tuning = default_tuning>
cudaError_t check_selection_mask(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                        const device_token_layout& layout,
                                        const std::uint8_t* d_selected,
                                        cudaStream_t stream = nullptr) {
  device_report* report = nullptr;
  if (const detail::call_start start =
          detail::begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  if (layout.tokens == 0) return cudaSuccess;
  const detail::masked_selection_check check{layout, d_selected, report};
  return detail::launch(detail::for_each_kernel<detail::masked_selection_check>,
                        detail::blocks_for(layout.tokens, Tuning::thread_item_block_threads),
                        Tuning::thread_item_block_threads, stream, layout.tokens, check);
}

// Clip-Cov over a selection mask, as cascade_rl::clip_cov_loss with that selection;
// d_rollout_is_weights may be null. d_result: one loss_tally.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t clip_cov_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                          const device_token_layout& layout, const T* d_log_probs,
                          const T* d_old_log_probs, const T* d_advantages,
                          const T* d_rollout_is_weights, const std::uint8_t* d_selected,
                          T* d_grad_out, const loss_normalizer& normalizer,
                          const clip_cov_options& options, loss_tally* d_result,
                          cudaStream_t stream = nullptr) {
  const detail::clip_cov_term<T> term{d_log_probs, d_old_log_probs, d_advantages,
                                      d_rollout_is_weights, {d_selected, options}};
  return detail::run_tokens<Tuning>(d_temp_storage, temp_storage_bytes, layout, term, d_grad_out,
                            options.aggregation, normalizer, d_result, stream);
}

// KL-Cov over a selection mask, as cascade_rl::kl_cov_loss with that selection;
// d_rollout_is_weights may be null. d_result: one loss_tally.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t kl_cov_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                        const device_token_layout& layout, const T* d_log_probs,
                        const T* d_old_log_probs, const T* d_advantages,
                        const T* d_rollout_is_weights, const std::uint8_t* d_selected,
                        T* d_grad_out, const loss_normalizer& normalizer,
                        const kl_cov_options& options, loss_tally* d_result,
                        cudaStream_t stream = nullptr) {
  const detail::kl_cov_term<T> term{d_log_probs, d_old_log_probs, d_advantages,
                                    d_rollout_is_weights, {d_selected, options}};
  return detail::run_tokens<Tuning>(d_temp_storage, temp_storage_bytes, layout, term, d_grad_out,
                            options.aggregation, normalizer, d_result, stream);
}

}  // namespace cascade_rl::cuda
