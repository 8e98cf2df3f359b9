#pragma once
// One backward step of generalized advantage estimation (Schulman et al. 2016, "High-
// Dimensional Continuous Control Using Generalized Advantage Estimation"; veRL's
// compute_gae_advantage_return):
//   delta_t = r_t + gamma * V_next - V_t
//   A_t     = delta_t + (gamma * lambda) * A_next
// where V_next and A_next are those of the next valid token of the sequence (0 past its
// end). Each product is rounded alone, so that a build with FMA contraction gives the
// same bits. The host loop, the Thrust portable path and the CUDA kernel all call this.

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"

namespace cascade_rl::terms {

// The running state of the backward pass: the value and advantage of the next valid
// token (both 0 past the last one).
struct gae_state {
  double next_value = 0.0;
  double advantage = 0.0;
};

// The advantage of token t from its reward and value and the state after it.
CASCADE_RL_HD inline double gae_advantage(double reward, double value, double gamma,
                                          double gamma_lambda, const gae_state& after) {
  const double delta = (reward + math::product_unfused(gamma, after.next_value)) - value;
  return delta + math::product_unfused(gamma_lambda, after.advantage);
}

// The state before token t: a valid token replaces it, a masked one (padding, a tool
// observation) passes the state through unchanged, as veRL skips the value and TD
// error of observation tokens.
CASCADE_RL_HD inline gae_state gae_step(double reward, double value, bool valid, double gamma,
                                        double gamma_lambda, const gae_state& after) {
  if (!valid) return after;
  return {value, gae_advantage(reward, value, gamma, gamma_lambda, after)};
}

}  // namespace cascade_rl::terms
