#pragma once
// The sequence-level ratio losses (GSPO, GMPO, sequence SAPO;
// algorithms/sequence_ratio_losses.hpp) on the portable path: a pre-pass per sequence, then
// the token pass.

#include "cascade_rl/cuda/detail/contextual_tokens.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/cuda/portable/token_reduction.hpp"
#include "cascade_rl/terms/sequence_ratio_tokens.hpp"

namespace cascade_rl::cuda::portable {

namespace detail {

// out[s] = the mean log-ratio of sequence s (terms::sequence_mean_log_ratio, the host's
// order), one work item per sequence.
template <class T>
struct sequence_log_ratio_rule {
  const T* log_probs;
  const T* old_log_probs;
  double* out;
  CASCADE_RL_HD void operator()(const device_token_layout& layout, std::size_t s) const {
    out[s] = terms::sequence_mean_log_ratio(log_probs, old_log_probs, layout.mask, layout.begin(s),
                                            layout.end(s));
  }
};

}  // namespace detail

// GSPO: `sequence_scratch` holds layout.sequences doubles (the pre-pass's means);
// rollout_is_weights may be null (no weights).
template <class ExecPolicy, class T>
void gspo_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
               const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
               T* grad_out, const loss_normalizer& normalizer, const gspo_options& options,
               double* sequence_scratch, loss_tally* scratch) {
  detail::for_each_sequence(
      exec, layout,
      detail::sequence_log_ratio_rule<T>{log_probs, old_log_probs, sequence_scratch});
  const detail::gspo_term<T> term{log_probs, old_log_probs, advantages, rollout_is_weights,
                                  {sequence_scratch, layout, options}};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

namespace detail {

// out[s] = the loss of sequence s (terms::geo_mean_sequence_loss, the host's order).
template <class T>
struct geo_mean_sequence_rule {
  const T* log_probs;
  const T* old_log_probs;
  const T* advantages;
  const T* rollout_is_weights;
  geo_mean_options params;
  double* out;
  CASCADE_RL_HD void operator()(const device_token_layout& layout, std::size_t s) const {
    out[s] = terms::geo_mean_sequence_loss(log_probs, old_log_probs, advantages, rollout_is_weights,
                                           layout.mask, layout.begin(s), layout.end(s), params);
  }
};

}  // namespace detail

// GMPO: `sequence_scratch` holds layout.sequences doubles (the pre-pass's row losses);
// rollout_is_weights may be null (no weights).
template <class ExecPolicy, class T>
void geo_mean_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                   const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
                   T* grad_out, const loss_normalizer& normalizer, const geo_mean_options& options,
                   double* sequence_scratch, loss_tally* scratch) {
  detail::for_each_sequence(
      exec, layout,
      detail::geo_mean_sequence_rule<T>{log_probs, old_log_probs, advantages, rollout_is_weights,
                                        options, sequence_scratch});
  const detail::geo_mean_term<T> term{log_probs, old_log_probs, advantages, rollout_is_weights,
                                      {sequence_scratch, layout, options}};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

namespace detail {

// out[s] = row s's ratio and gradient (terms::sequence_sapo_row_of, the host's order).
template <class T>
struct sequence_sapo_row_rule {
  const T* log_probs;
  const T* old_log_probs;
  const T* advantages;
  sequence_sapo_options params;
  terms::sequence_sapo_row* out;
  CASCADE_RL_HD void operator()(const device_token_layout& layout, std::size_t s) const {
    out[s] = terms::sequence_sapo_row_of(log_probs, old_log_probs, advantages, layout.mask,
                                         layout.begin(s), layout.end(s), params);
  }
};

}  // namespace detail

// SAPO at sequence level: `row_scratch` holds layout.sequences rows (the pre-pass's ratio
// and gradient per row). No given weights: the host refuses them (its gradient is the
// row's summed derivative).
template <class ExecPolicy, class T>
void sequence_sapo_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                        const T* old_log_probs, const T* advantages, T* grad_out,
                        const loss_normalizer& normalizer, const sequence_sapo_options& options,
                        terms::sequence_sapo_row* row_scratch, loss_tally* scratch) {
  detail::for_each_sequence(
      exec, layout,
      detail::sequence_sapo_row_rule<T>{log_probs, old_log_probs, advantages, options, row_scratch});
  const detail::sequence_sapo_term<T> term{log_probs, old_log_probs, advantages, nullptr,
                                           {{row_scratch, layout}, options}};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

}  // namespace cascade_rl::cuda::portable
