#pragma once
// The CUB-shaped layer of the token losses: REINFORCE, PPO clip, CISPO, DPPO, DRO, SAPO, the KL
// penalty and loss, the aggregation of caller token losses, local_loss_counts; two or three
// launches of kernel/token_losses.cuh each. Size query with d_temp_storage == nullptr, then the
// run; the result (loss and metrics: loss_tally, the host core's policy_loss_result) is
// written to d_result in device memory. The temporary storage starts with the
// device_report (report_of) that names non-finite inputs.

#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/token_terms.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/token_losses.cuh"
#include "cascade_rl/options/kl.hpp"
#include "cascade_rl/options/loss_normalizer.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/policy_gradient_tokens.hpp"
#include "cascade_rl/terms/ratio_loss_tokens.hpp"

namespace cascade_rl::cuda {

// The loss and metrics of a call, as the host core returns them (one struct, one field
// list: terms/policy_loss_metrics.hpp).
using loss_tally = detail::loss_tally;

namespace detail {

// The launches every token loss shares: the per-sequence valid counts (seq-mean-token-mean
// only), the token kernel, the combine. A loss whose term needs one Value per sequence
// first (a double: GSPO's mean log-ratio, GMPO's sequence loss; sequence SAPO's row)
// passes pre_pass(values, report), which launches its kernel into the carved values, and
// make_term(values) builds the term from them; run_tokens is the same run without either.
template <class Tuning, class Value = double, class T, class PrePass, class MakeTerm>
cudaError_t run_tokens_after_sequence_pass(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                           const device_token_layout& layout,
                                           const PrePass& pre_pass, const MakeTerm& make_term,
                                           T* grad_out, loss_aggregation mode,
                                           const loss_normalizer& normalizer, loss_tally* d_result,
                                           cudaStream_t stream) {
  constexpr bool has_pre_pass = !std::is_same_v<PrePass, std::nullptr_t>;
  const bool per_sequence = mode == loss_aggregation::seq_mean_token_mean;
  const std::size_t blocks = (layout.tokens + canonical_block - 1) / canonical_block;
  const std::size_t tiles = (blocks + token_warps<Tuning> - 1) / token_warps<Tuning>;
  temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  loss_tally* partials = carve.take<loss_tally>(blocks);
  unsigned long long* valid = carve.take<unsigned long long>(per_sequence ? layout.sequences : 0);
  Value* sequence_values = has_pre_pass ? carve.take<Value>(layout.sequences) : nullptr;
  if (const call_start start = begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  if constexpr (has_pre_pass) {
    if (layout.sequences > 0) CASCADE_RL_CUDA_TRY(pre_pass(sequence_values, report));
  }
  if (per_sequence && layout.sequences > 0) {
    constexpr unsigned threads = Tuning::warp_item_block_threads;
    CASCADE_RL_CUDA_TRY(launch(sequence_valid_kernel<Tuning>, blocks_for(layout.sequences * 32, threads),
                               threads, stream, layout, valid, report));
  }
  const auto term = make_term(static_cast<const Value*>(sequence_values));
  if (tiles > 0) {
    CASCADE_RL_CUDA_TRY(launch(token_loss_kernel<Tuning, T, std::decay_t<decltype(term)>>,
                               static_cast<unsigned>(tiles), Tuning::warp_item_block_threads, stream,
                               layout, term,
                               grad_out, mode, normalizer, per_sequence ? valid : nullptr, partials,
                               report));
  }
  return launch(combine_tallies_kernel<>, 1, combine_block_threads, stream, partials, blocks, d_result);
}

template <class Tuning, class T, class Term>
cudaError_t run_tokens(void* d_temp_storage, std::size_t& temp_storage_bytes,
                       const device_token_layout& layout, const Term& term, T* grad_out,
                       loss_aggregation mode, const loss_normalizer& normalizer,
                       loss_tally* d_result, cudaStream_t stream) {
  return run_tokens_after_sequence_pass<Tuning>(
      d_temp_storage, temp_storage_bytes, layout, nullptr, [&term](const double*) { return term; },
      grad_out, mode, normalizer, d_result, stream);
}

}  // namespace detail

// The counts of one slice of a step (local_loss_counts of the host core): valid tokens and
// sequences with at least one valid token, written to d_counts. Sum them over slices and
// ranks into the loss_normalizer. The report names broken offsets. The temporary storage
// holds a partial per CUDA block, so its size depends on the tuning.
template <tuning_policy Tuning = default_tuning>
cudaError_t local_loss_counts(void* d_temp_storage, std::size_t& temp_storage_bytes,
                              const device_token_layout& layout, loss_counts* d_counts,
                              cudaStream_t stream = nullptr) {
  constexpr unsigned threads = Tuning::warp_item_block_threads;
  const unsigned blocks = detail::blocks_for(layout.sequences * 32, threads);
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  detail::valid_counts* partials = carve.take<detail::valid_counts>(blocks);
  if (const detail::call_start start = detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  if (blocks > 0) {
    CASCADE_RL_CUDA_TRY(detail::launch(detail::loss_counts_kernel<Tuning>, blocks, threads, stream, layout,
                                       partials, report));
  }
  return detail::launch(detail::combine_counts_kernel<Tuning>, 1, threads, stream, partials, blocks, d_counts);
}

// d_behaviour may be null when options.importance.mode is none, d_rollout_is_weights when
// there are none. d_result: one loss_tally.

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t reinforce_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                           const device_token_layout& layout, const T* d_log_probs,
                           const T* d_advantages, const T* d_behaviour,
                           const T* d_rollout_is_weights, T* d_grad_out,
                           const loss_normalizer& normalizer, const reinforce_options& options,
                           loss_tally* d_result, cudaStream_t stream = nullptr) {
  const detail::reinforce_term<T> term{d_log_probs,
                                       d_advantages,
                                       d_behaviour,
                                       d_rollout_is_weights,
                                       options.surrogate == reinforce_surrogate::log_prob,
                                       options.importance};
  return detail::run_tokens<Tuning>(d_temp_storage, temp_storage_bytes, layout, term, d_grad_out,
                            options.aggregation, normalizer, d_result, stream);
}

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t ppo_clip_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                          const device_token_layout& layout, const T* d_log_probs,
                          const T* d_old_log_probs, const T* d_advantages, const T* d_behaviour,
                          const T* d_rollout_is_weights, T* d_grad_out,
                          const loss_normalizer& normalizer, const ppo_clip_options& options,
                          loss_tally* d_result, cudaStream_t stream = nullptr) {
  const detail::ppo_term<T> term{d_log_probs,          d_old_log_probs,
                                 d_advantages,         d_behaviour,
                                 d_rollout_is_weights, cascade_rl::detail::ppo_params_of(options),
                                 options.importance};
  return detail::run_tokens<Tuning>(d_temp_storage, temp_storage_bytes, layout, term, d_grad_out,
                            options.aggregation, normalizer, d_result, stream);
}

namespace detail {

// The ratio losses (CISPO, DPPO, DRO, SAPO): the options' token function
// (visit_ratio_token) as a ratio_term.
template <tuning_policy Tuning = default_tuning, class T, class Options>
cudaError_t ratio_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                       const device_token_layout& layout, const T* d_log_probs,
                       const T* d_old_log_probs, const T* d_advantages,
                       const T* d_rollout_is_weights, T* d_grad_out,
                       const loss_normalizer& normalizer, const Options& options,
                       loss_tally* d_result, cudaStream_t stream) {
  return cascade_rl::detail::visit_ratio_token(options, [&](const auto& token) {
    const ratio_term<T, std::decay_t<decltype(token)>> term{
        d_log_probs, d_old_log_probs, d_advantages, d_rollout_is_weights, token};
    return run_tokens<Tuning>(d_temp_storage, temp_storage_bytes, layout, term, d_grad_out,
                              options.aggregation, normalizer, d_result, stream);
  });
}

}  // namespace detail

// d_rollout_is_weights may be null (no weights) in the four ratio losses.

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t cispo_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                       const device_token_layout& layout, const T* d_log_probs,
                       const T* d_old_log_probs, const T* d_advantages,
                       const T* d_rollout_is_weights, T* d_grad_out,
                       const loss_normalizer& normalizer, const cispo_options& options,
                       loss_tally* d_result, cudaStream_t stream = nullptr) {
  return detail::ratio_loss<Tuning>(d_temp_storage, temp_storage_bytes, layout, d_log_probs,
                            d_old_log_probs, d_advantages, d_rollout_is_weights, d_grad_out,
                            normalizer, options, d_result, stream);
}

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t dppo_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                      const device_token_layout& layout, const T* d_log_probs,
                      const T* d_old_log_probs, const T* d_advantages,
                      const T* d_rollout_is_weights, T* d_grad_out,
                      const loss_normalizer& normalizer, const dppo_options& options,
                      loss_tally* d_result, cudaStream_t stream = nullptr) {
  return detail::ratio_loss<Tuning>(d_temp_storage, temp_storage_bytes, layout, d_log_probs,
                            d_old_log_probs, d_advantages, d_rollout_is_weights, d_grad_out,
                            normalizer, options, d_result, stream);
}

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t dro_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                     const device_token_layout& layout, const T* d_log_probs,
                     const T* d_old_log_probs, const T* d_advantages, const T* d_rollout_is_weights,
                     T* d_grad_out, const loss_normalizer& normalizer, const dro_options& options,
                     loss_tally* d_result, cudaStream_t stream = nullptr) {
  return detail::ratio_loss<Tuning>(d_temp_storage, temp_storage_bytes, layout, d_log_probs,
                            d_old_log_probs, d_advantages, d_rollout_is_weights, d_grad_out,
                            normalizer, options, d_result, stream);
}

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t sapo_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                      const device_token_layout& layout, const T* d_log_probs,
                      const T* d_old_log_probs, const T* d_advantages,
                      const T* d_rollout_is_weights, T* d_grad_out,
                      const loss_normalizer& normalizer, const sapo_options& options,
                      loss_tally* d_result, cudaStream_t stream = nullptr) {
  return detail::ratio_loss<Tuning>(d_temp_storage, temp_storage_bytes, layout, d_log_probs,
                            d_old_log_probs, d_advantages, d_rollout_is_weights, d_grad_out,
                            normalizer, options, d_result, stream);
}

// d_values_out may be null; d_result->loss is the sum of k_t over valid tokens.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t kl_penalty(void* d_temp_storage, std::size_t& temp_storage_bytes,
                       const device_token_layout& layout, const T* d_log_probs,
                       const T* d_ref_log_probs, T* d_values_out, T* d_grad_out,
                       const kl_options& options, loss_tally* d_result, cudaStream_t stream = nullptr) {
  const detail::kl_term<T> term{d_log_probs, d_ref_log_probs, options, 1.0, d_values_out};
  return detail::run_tokens<Tuning>(d_temp_storage, temp_storage_bytes, layout, term, d_grad_out,
                            loss_aggregation::token_sum, loss_normalizer{}, d_result, stream);
}

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t kl_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                    const device_token_layout& layout, const T* d_log_probs,
                    const T* d_ref_log_probs, T* d_grad_out, const loss_normalizer& normalizer,
                    const kl_loss_options& options, loss_tally* d_result, cudaStream_t stream = nullptr) {
  const detail::kl_term<T> term{d_log_probs, d_ref_log_probs, options.kl,
                                options.coefficient, nullptr};
  return detail::run_tokens<Tuning>(d_temp_storage, temp_storage_bytes, layout, term, d_grad_out,
                            options.aggregation, normalizer, d_result, stream);
}

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t aggregate_token_losses(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                   const device_token_layout& layout, const T* d_token_losses,
                                   const T* d_token_grads, T* d_grad_out,
                                   const loss_normalizer& normalizer, loss_aggregation mode,
                                   loss_tally* d_result, cudaStream_t stream = nullptr) {
  return detail::run_tokens<Tuning>(d_temp_storage, temp_storage_bytes, layout,
                            detail::aggregate_term<T>{d_token_losses, d_token_grads}, d_grad_out,
                            mode, normalizer, d_result, stream);
}

}  // namespace cascade_rl::cuda
