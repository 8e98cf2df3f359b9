#pragma once
// One backward step of the discounted return (REINFORCE++, veRL's
// compute_reinforce_plus_plus_outcome_advantage): ret_t = r_t + gamma * run, where run
// is the return after t (0 past a masked token). The product is rounded alone, so that
// a build with FMA contraction gives the same bits.

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"

namespace cascade_rl::terms {

CASCADE_RL_HD inline double discounted_return(double reward, double gamma, double run) {
  return reward + math::product_unfused(gamma, run);
}

}  // namespace cascade_rl::terms
