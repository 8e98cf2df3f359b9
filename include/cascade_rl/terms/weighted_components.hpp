#pragma once
// GDPO's combination of per-component advantages (veRL's compute_gdpo_outcome_advantage):
// acc += w_k * a_k, components in order, each product rounded alone so that a build with
// FMA contraction gives the same bits. The host loops, the Thrust portable path and the
// CUDA kernel all call this.

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"

namespace cascade_rl::terms {

CASCADE_RL_HD inline double add_weighted_component(double acc, double weight, double advantage) {
  return acc + math::product_unfused(weight, advantage);
}

}  // namespace cascade_rl::terms
