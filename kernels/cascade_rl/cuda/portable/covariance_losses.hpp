#pragma once
// The covariance-selection losses (Clip-Cov, KL-Cov; algorithms/covariance_losses.hpp) on
// the portable path: the selection by a stable sort of the tokens' keys, then the token
// pass.

#include <thrust/sort.h>

#include "cascade_rl/cuda/detail/covariance_terms.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/cuda/portable/token_reduction.hpp"

namespace cascade_rl::cuda::portable {

// Entries of the double scratch clip_cov_seeded_selection needs for `tokens` tokens.
[[nodiscard]] inline std::size_t covariance_sum_scratch(std::size_t tokens) {
  return cascade_rl::cuda::detail::covariance_sum_entries(tokens);
}

namespace detail {

// Both selections' steps (detail/covariance_terms.hpp): zero the mask, canonical block
// sums and their totals, keys_of(totals) per token, a stable sort by key (so the order is
// (key, index)), then the first selection_count(ratio, valid) keyed tokens marked.
template <class ExecPolicy, class T, class KeysOf>
void covariance_selection(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                          const T* advantages, double ratio, std::uint8_t* selected, double* sums,
                          std::uint64_t* keys, std::size_t* indices, const KeysOf& keys_of) {
  const std::size_t n = layout.tokens;
  if (n == 0) return;
  thrust::fill_n(exec, selected, n, std::uint8_t{0});
  const std::size_t blocks = reduce_blocks(n);
  for_each_index(exec, blocks,
                 covariance_block_sums_functor<T>{layout, advantages, log_probs, sums});
  for_each_index(exec, 1, covariance_combine_functor{sums, blocks});
  const double* totals = sums + 3 * blocks;
  for_each_index(exec, n, keys_of(totals));
  thrust::stable_sort_by_key(exec, keys, keys + n, indices);
  for_each_index(exec, n, mark_selected_functor{keys, indices, totals, ratio, selected});
}

}  // namespace detail

// Our seeded Clip-Cov draw (token_selection::seeded of the host core, same tokens):
// selected[t] = 1 on the selected tokens, 0 elsewhere. Scratch, in the system's memory:
// sums (covariance_sum_scratch(tokens) doubles), keys and indices (one per token). Every
// token is sorted by its key (non-candidates last), stably, so the order is (key, index).
template <class ExecPolicy, class T>
void clip_cov_seeded_selection(ExecPolicy&& exec, const device_token_layout& layout,
                               const T* log_probs, const T* old_log_probs, const T* advantages,
                               std::uint64_t seed, const clip_cov_options& options,
                               std::uint8_t* selected, double* sums, std::uint64_t* keys,
                               std::size_t* indices) {
  detail::covariance_selection(exec, layout, log_probs, advantages, options.clip_cov_ratio,
                               selected, sums, keys, indices, [&](const double* totals) {
                                 return detail::clip_cov_keys_functor<T>{
                                     layout, log_probs, old_log_probs, advantages, totals,
                                     seed,   options,   keys,          indices};
                               });
}

// Clip-Cov over a selection mask (one byte per token, non-zero: selected), as
// cascade_rl::clip_cov_loss with that selection; rollout_is_weights may be null.
template <class ExecPolicy, class T>
void clip_cov_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                   const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
                   const std::uint8_t* selected, T* grad_out, const loss_normalizer& normalizer,
                   const clip_cov_options& options, loss_tally* scratch) {
  const detail::clip_cov_term<T> term{log_probs, old_log_probs, advantages, rollout_is_weights,
                                      {selected, options}};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

// KL-Cov's selection (kl_cov_selection of the host core, same tokens): selected[t] = 1 on
// the k valid tokens of largest cov (ties to the smaller index), 0 elsewhere. Scratch as
// clip_cov_seeded_selection's.
template <class ExecPolicy, class T>
void kl_cov_selection(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                      const T* advantages, const kl_cov_options& options, std::uint8_t* selected,
                      double* sums, std::uint64_t* keys, std::size_t* indices) {
  detail::covariance_selection(exec, layout, log_probs, advantages, options.kl_cov_ratio, selected,
                               sums, keys, indices, [&](const double* totals) {
                                 return detail::kl_cov_keys_functor<T>{
                                     layout, log_probs, advantages, totals, keys, indices};
                               });
}

// KL-Cov over a selection mask (one byte per token, non-zero: the KL penalty applies), as
// cascade_rl::kl_cov_loss with that selection; rollout_is_weights may be null.
template <class ExecPolicy, class T>
void kl_cov_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                 const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
                 const std::uint8_t* selected, T* grad_out, const loss_normalizer& normalizer,
                 const kl_cov_options& options, loss_tally* scratch) {
  const detail::kl_cov_term<T> term{log_probs, old_log_probs, advantages, rollout_is_weights,
                                    {selected, options}};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

}  // namespace cascade_rl::cuda::portable
