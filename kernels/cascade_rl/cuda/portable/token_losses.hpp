#pragma once
// The token losses on the portable path (REINFORCE, PPO clip, CISPO, DPPO, DRO, SAPO, the
// KL penalty and loss, caller token losses) and local_loss_counts, over the token pass of
// token_reduction.hpp.

#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/cuda/portable/token_reduction.hpp"
#include "cascade_rl/terms/policy_gradient_tokens.hpp"
#include "cascade_rl/terms/ratio_loss_tokens.hpp"

namespace cascade_rl::cuda::portable {

namespace detail {

// The valid tokens of one sequence, for local_loss_counts.
struct sequence_counts_functor {
  device_token_layout layout;
  CASCADE_RL_HD valid_counts operator()(std::size_t s) const {
    return counts_of_sequence(valid_tokens_of(layout, s));
  }
};

}  // namespace detail

// The counts of one slice of a step: valid tokens and sequences with at least one.
template <class ExecPolicy>
[[nodiscard]] loss_counts local_loss_counts(ExecPolicy&& exec, const device_token_layout& layout) {
  if (layout.sequences == 0) return {};
  const thrust::counting_iterator<std::size_t> index(0);
  return detail::to_loss_counts(thrust::transform_reduce(
      exec, index, index + layout.sequences, detail::sequence_counts_functor{layout},
      detail::valid_counts{}, detail::add_valid_counts{}));
}

// Entries of `scratch` a token loss over `tokens` tokens needs; the result is the last.
[[nodiscard]] inline std::size_t scratch_tallies(std::size_t tokens) {
  return detail::reduce_blocks(tokens) + 1;
}
[[nodiscard]] inline std::size_t result_index(std::size_t tokens) { return scratch_tallies(tokens) - 1; }

// behaviour may be null when options.importance.mode is none, rollout_is_weights when
// there are none.
template <class ExecPolicy, class T>
void reinforce_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                    const T* advantages, const T* behaviour, const T* rollout_is_weights,
                    T* grad_out, const loss_normalizer& normalizer,
                    const reinforce_options& options, loss_tally* scratch) {
  const detail::reinforce_term<T> term{log_probs,
                                       advantages,
                                       behaviour,
                                       rollout_is_weights,
                                       options.surrogate == reinforce_surrogate::log_prob,
                                       options.importance};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

// behaviour and rollout_is_weights as for reinforce_loss.
template <class ExecPolicy, class T>
void ppo_clip_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                   const T* old_log_probs, const T* advantages, const T* behaviour,
                   const T* rollout_is_weights, T* grad_out, const loss_normalizer& normalizer,
                   const ppo_clip_options& options, loss_tally* scratch) {
  const detail::ppo_term<T> term{log_probs,          old_log_probs,
                                 advantages,         behaviour,
                                 rollout_is_weights, cascade_rl::detail::ppo_params_of(options),
                                 options.importance};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

namespace detail {

// The ratio losses (CISPO, DPPO, DRO, SAPO): the options' token function
// (visit_ratio_token) as a ratio_term.
template <class ExecPolicy, class T, class Options>
void ratio_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
                T* grad_out, const loss_normalizer& normalizer, const Options& options,
                loss_tally* scratch) {
  cascade_rl::detail::visit_ratio_token(options, [&](const auto& token) {
    const ratio_term<T, std::decay_t<decltype(token)>> term{log_probs, old_log_probs, advantages,
                                                            rollout_is_weights, token};
    reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
  });
}

}  // namespace detail

// rollout_is_weights may be null (no weights) in the four ratio losses.

template <class ExecPolicy, class T>
void cispo_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
                T* grad_out, const loss_normalizer& normalizer, const cispo_options& options,
                loss_tally* scratch) {
  detail::ratio_loss(exec, layout, log_probs, old_log_probs, advantages, rollout_is_weights,
                     grad_out, normalizer, options, scratch);
}

template <class ExecPolicy, class T>
void dppo_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
               const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
               T* grad_out, const loss_normalizer& normalizer, const dppo_options& options,
               loss_tally* scratch) {
  detail::ratio_loss(exec, layout, log_probs, old_log_probs, advantages, rollout_is_weights,
                     grad_out, normalizer, options, scratch);
}

template <class ExecPolicy, class T>
void dro_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
              const T* old_log_probs, const T* advantages, const T* rollout_is_weights, T* grad_out,
              const loss_normalizer& normalizer, const dro_options& options, loss_tally* scratch) {
  detail::ratio_loss(exec, layout, log_probs, old_log_probs, advantages, rollout_is_weights,
                     grad_out, normalizer, options, scratch);
}

template <class ExecPolicy, class T>
void sapo_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
               const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
               T* grad_out, const loss_normalizer& normalizer, const sapo_options& options,
               loss_tally* scratch) {
  detail::ratio_loss(exec, layout, log_probs, old_log_probs, advantages, rollout_is_weights,
                     grad_out, normalizer, options, scratch);
}

// values_out may be null. The result's loss is the sum of k_t over valid tokens.
template <class ExecPolicy, class T>
void kl_penalty(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                const T* ref_log_probs, T* values_out, T* grad_out, const kl_options& options,
                loss_tally* scratch) {
  const detail::kl_term<T> term{log_probs, ref_log_probs, options, 1.0, values_out};
  detail::reduce_tokens(exec, layout, term, grad_out, loss_aggregation::token_sum, {}, scratch);
}

template <class ExecPolicy, class T>
void kl_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
             const T* ref_log_probs, T* grad_out, const loss_normalizer& normalizer,
             const kl_loss_options& options, loss_tally* scratch) {
  const detail::kl_term<T> term{log_probs, ref_log_probs, options.kl,
                                options.coefficient, nullptr};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

template <class ExecPolicy, class T>
void aggregate_token_losses(ExecPolicy&& exec, const device_token_layout& layout,
                            const T* token_losses, const T* token_grads, T* grad_out,
                            const loss_normalizer& normalizer, loss_aggregation mode,
                            loss_tally* scratch) {
  detail::reduce_tokens(exec, layout, detail::aggregate_term<T>{token_losses, token_grads},
                        grad_out, mode, normalizer, scratch);
}

}  // namespace cascade_rl::cuda::portable
