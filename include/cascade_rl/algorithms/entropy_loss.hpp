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
#include <vector>

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
  detail::require_size(entropy.size(), layout.tokens(), "entropy", "one per token");
  detail::require_finite_where_valid(policy, entropy, layout, "entropy");
  // The seed of every token is the coefficient; aggregate_token_losses weighs it by c_t
  // (and checks the normaliser and grad_entropy_out).
  const std::vector<T> seed(entropy.size(), static_cast<T>(coefficient));
  return aggregate_token_losses(policy, layout, {.token_losses = entropy, .token_grads = seed},
                                grad_entropy_out, normalizer, mode);
}

}  // namespace cascade_rl
