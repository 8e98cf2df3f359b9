#pragma once
// ReMax's per-token terms (Li et al. 2023, "ReMax: A Simple, Effective, and Efficient
// Reinforcement Learning Method for Aligning Large Language Models"; veRL's
// compute_remax_outcome_advantage): the undiscounted reward-to-go over the valid tokens
// of a sequence, and the advantage that subtracts the sequence's baseline (the reward
// of its greedy response). The host loop, the Thrust portable path and the CUDA kernel
// all call these.

#include "cascade_rl/core/host_device.hpp"

namespace cascade_rl::terms {

// The reward-to-go at token t from the one after it: a masked token adds nothing and
// passes the sum through (veRL's reversed cumsum of rewards * mask).
CASCADE_RL_HD inline double reward_to_go(double reward, bool valid, double after) {
  return valid ? reward + after : after;
}

// The advantage of a valid token from its return as stored (in T) and the baseline:
// the T subtraction of the two, as veRL subtracts float32 tensors; 0 on masked tokens.
template <class T>
CASCADE_RL_HD inline T baseline_advantage(T stored_return, T baseline, bool valid) {
  return valid ? static_cast<T>(static_cast<double>(stored_return) - static_cast<double>(baseline))
               : T(0);
}

}  // namespace cascade_rl::terms
