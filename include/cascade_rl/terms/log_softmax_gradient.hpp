#pragma once
// The backward pass of log_probs_from_logits: dL/dx_v for one logit of a row, given the
// row's log-sum-exp state (terms/log_sum_exp.hpp, recomputed in the forward's order)
// and the seeds g = dL/dlogp and h = dL/dH of the row. With z = x / T, p = softmax(z),
// log p_v = z_v - lse and H = -sum p log p = lse - sum p z:
//   d log p_label / dz_v = 1[v == label] - p_v
//   dH / dz_v            = -p_v (z_v - sum p z) = -p_v (log p_v + H)
//   dL/dx_v              = (g (1[v == label] - p_v) - h p_v (log p_v + H)) / T.
// A logit of -inf has p = 0 and contributes 0 (not 0 * -inf). Each product that feeds
// the sum is rounded alone (product_unfused), so FMA contraction does not change the
// bits; the host, the Thrust path and the kernel call this one function.

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/terms/log_sum_exp.hpp"

namespace cascade_rl::terms {

// The row's quantities the gradient reads, from its lse_state.
struct softmax_row {
  double lse = 0;
  double entropy = 0;
};

CASCADE_RL_HD inline softmax_row softmax_row_of(const lse_state& st) {
  return {st.log_sum_exp(), st.entropy()};
}

// `scaled` is the logit times 1 / T in float, as the forward scales it (lse_value).
CASCADE_RL_HD inline float logit_gradient(float scaled, bool is_label, const softmax_row& row,
                                          double g_log_prob, double g_entropy,
                                          float inverse_temperature) {
  using math::detail::product_unfused;
  const double log_p = static_cast<double>(scaled) - row.lse;
  const double p = math::exp(log_p);
  const double entropy_term = p == 0.0 ? 0.0 : product_unfused(p, log_p + row.entropy);
  const double g = product_unfused(g_log_prob, (is_label ? 1.0 : 0.0) - p) -
                   product_unfused(g_entropy, entropy_term);
  return math::detail::canonical_nan(
      static_cast<float>(g * static_cast<double>(inverse_temperature)));
}

}  // namespace cascade_rl::terms
