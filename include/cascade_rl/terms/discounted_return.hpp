#pragma once
// One backward step of the discounted return (REINFORCE++, veRL's
// compute_reinforce_plus_plus_outcome_advantage): ret_t = r_t + gamma * run, where run
// is the return after t. The product is rounded alone, so that a build with FMA
// contraction gives the same bits.
//
// A masked token inside a sequence (a tool observation in a multi-turn rollout) either
//   carry  passes run through unchanged and gets return 0, its reward ignored: rewards
//          after the hole still reach the turns before it (veRL since 1dda039, whose
//          v2 vectors have such holes); or
//   cut    gets r_t + gamma * run itself and resets run to 0: nothing after the hole
//          reaches the tokens before it (veRL's earlier "reset after EOS" loop).
// Both agree wherever the masked tokens are only padding after the last valid token.

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/group_estimators.hpp"

namespace cascade_rl::terms {

CASCADE_RL_HD inline double discounted_return(double reward, double gamma, double run) {
  return reward + math::product_unfused(gamma, run);
}

// The token's return and the run carried to the token before it.
struct return_step {
  double value = 0;
  double run = 0;
};

CASCADE_RL_HD inline return_step discounted_return_step(double reward, bool valid, double gamma,
                                                        double run, masked_token_return masked) {
  if (valid) {
    const double ret = discounted_return(reward, gamma, run);
    return {ret, ret};
  }
  if (masked == masked_token_return::carry) return {0.0, run};
  return {discounted_return(reward, gamma, run), 0.0};
}

}  // namespace cascade_rl::terms
