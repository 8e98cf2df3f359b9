#pragma once
// The entropy term of a policy objective, aggregated like the policy loss: veRL's
// compute_entropy_loss is agg_loss(entropy, mask, loss_agg_mode), and its actor adds
// -entropy_coeff times it to the policy loss (an entropy bonus). entropy_loss returns the
// aggregated entropy sum_t c_t H_t (c_t the aggregation weight of the mode and normaliser,
// as every loss here) and writes the seed dL/dH_t = coefficient * c_t of
// L = coefficient * that value, which log_probs_backward (log_prob_seeds::entropy) and
// fused_linear_log_probs_backward turn into the gradient w.r.t. the logits. For veRL's
// bonus pass coefficient = -entropy_coeff. With the trainer's loss_scale_factor as the
// normaliser's sequence count the value is veRL's actor/entropy metric.

#include <cmath>
#include <span>
#include <string>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/token_layout.hpp"

namespace cascade_rl {

template <exec::host_policy Policy, contiguous_output Out>
double entropy_loss(const Policy& policy, const token_layout& layout,
                    std::span<const output_value_t<Out>> entropy, Out&& grad_entropy_out,
                    const loss_normalizer& normalizer, loss_aggregation mode,
                    double coefficient = 1.0) {
  using T = output_value_t<Out>;
  if (!std::isfinite(coefficient))
    detail::fail("coefficient", "is " + std::to_string(coefficient) + ", expected finite");
  const std::span<T> grad_out = output_span(grad_entropy_out);
  const std::size_t n = layout.tokens();
  // Every token's seed is the coefficient (at T's precision, as a caller's per-token
  // array of it would hold), weighed by c_t in the one token pass; no array of it is
  // made (at 16M tokens its allocation and fill cost more than the pass).
  const double seed = static_cast<double>(static_cast<T>(coefficient));
  return detail::checked_token_losses<detail::no_metrics>(
             policy, layout, grad_out, normalizer, mode,
             entropy.size() == n && grad_out.size() == n,
             [&] {
               detail::require_size(entropy.size(), n, "entropy", "one per token");
               detail::require_finite_where_valid(policy, entropy, layout, "entropy");
               detail::require_size(grad_out.size(), n, "grad_entropy_out", "one per token");
               detail::validate_normalizer(policy, layout, normalizer, mode);
             },
             [&](std::size_t t) { return detail::nonfinite_at(entropy, t); },
             [&](std::size_t t, detail::no_metrics&) {
               return detail::token_loss{static_cast<double>(entropy[t]), seed};
             })
      .loss;
}

}  // namespace cascade_rl
