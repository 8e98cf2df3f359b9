#pragma once
// The optimal token baseline's per-token terms (veRL's compute_optimal_token_baseline_advantage
// and compute_multi_turn_optimal_token_baseline_advantage): the path-variance weight of a
// token, the running sums of a group's returns weighted by the cumulative weights at one
// position, the baseline and the advantage. The host loops, the Thrust portable path and
// the CUDA kernels all call these, in the same order, for the same bits:
//   w_t = (1 - 2 exp(old_logp_t) + sum_pi_squared_t) * rho_t^2   (rho = 1 without weights)
//   W_t = sum of w_j over the valid tokens j <= t of the sequence
//   B_p = sum_i G_i(p) W_i(p) / (sum_i W_i(p) + epsilon)  over the group's rows i holding a
//         valid token at position p, in row order
//   A_t = G_t - B_p on valid tokens, 0 on masked ones.

#include <cstddef>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"

namespace cascade_rl::terms {

// ||e_a - pi||^2 = 1 - 2 pi_a + sum pi^2 for the sampled token a, times the squared
// importance weight (pass 1 without weights: the product is then exact). 2 * pi is exact.
CASCADE_RL_HD inline double otb_token_weight(double old_log_prob, double sum_pi_squared,
                                             double rollout_is_weight) {
  const double w = 1.0 - 2.0 * math::exp(old_log_prob) + sum_pi_squared;
  return math::detail::product_rn(w,
                                  math::detail::product_rn(rollout_is_weight, rollout_is_weight));
}

// A group's sums at one position, rows added in index order.
struct otb_sums {
  double weighted = 0.0;  // sum G W, each product rounded alone
  double weight = 0.0;    // sum W
};

CASCADE_RL_HD inline void otb_add(otb_sums& acc, double token_return, double cumulative_weight) {
  acc.weighted += math::detail::product_rn(token_return, cumulative_weight);
  acc.weight += cumulative_weight;
}

// The baseline at a position: sum G W / (sum W + epsilon) (0 when no row holds it).
CASCADE_RL_HD inline double otb_baseline(const otb_sums& acc, double epsilon) {
  return math::detail::quotient(acc.weighted, acc.weight + epsilon);
}

// The advantage of a token from its return as stored (in T) and its baseline; 0 on masked
// tokens.
template <class T>
CASCADE_RL_HD inline T otb_advantage(T stored_return, double baseline, bool valid) {
  return valid ? static_cast<T>(static_cast<double>(stored_return) - baseline) : T(0);
}

// handle_zero_tail: within a group, the row holding strictly more valid tokens than every
// other (veRL: the unique longest) gets baseline 0 from position `second` on, `second`
// being the next-largest count (veRL compares a count with a position, and so do we).
struct otb_zero_tail {
  std::size_t row = static_cast<std::size_t>(-1);  // none
  std::size_t from = 0;
};

// Add the next member row's valid-token count (rows in index order).
struct otb_lengths {
  std::size_t max = 0, second = 0, max_row = 0, members = 0;
  bool max_unique = false;
};

CASCADE_RL_HD inline void otb_add_length(otb_lengths& acc, std::size_t row, std::size_t count) {
  if (acc.members == 0 || count > acc.max) {
    if (acc.members != 0) acc.second = acc.max;
    acc.max = count;
    acc.max_row = row;
    acc.max_unique = true;
  } else if (count == acc.max) {
    acc.max_unique = false;
    acc.second = count;
  } else if (count > acc.second) {
    acc.second = count;
  }
  ++acc.members;
}

CASCADE_RL_HD inline otb_zero_tail otb_zero_tail_of(const otb_lengths& acc, bool handle_zero_tail) {
  otb_zero_tail z;
  if (handle_zero_tail && acc.members >= 2 && acc.max_unique && acc.max > acc.second) {
    z.row = acc.max_row;
    z.from = acc.second;
  }
  return z;
}

}  // namespace cascade_rl::terms
