#pragma once
// GRPO pass@k's advantage (Chen et al. 2025, "Pass@k Training for Adaptively Balancing
// Exploration and Exploitation of Large Reasoning Models"; veRL's
// compute_grpo_passk_outcome_advantage): only the best response of a group learns,
//   A_best = (r_max - r_second) [/ (std_g(r) + eps)],   every other A_i = 0,
// r_second being the second largest reward (equal to r_max when the maximum is tied, so
// a tied or constant group gets 0 everywhere). best is the first index holding r_max.
// The host loops, the Thrust portable path and the CUDA kernel call these in index order.

#include <cstddef>

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/group_advantage.hpp"
#include "cascade_rl/terms/group_moments.hpp"

namespace cascade_rl::terms {

struct passk_top {
  std::size_t best = 0;  // the first index of the maximum
  double first = 0.0;    // the maximum
  double second = 0.0;   // the second largest value (the maximum again when tied)
  std::size_t count = 0;
};

// Adds value v at index i (indices in increasing order).
CASCADE_RL_HD inline void passk_add(passk_top& top, std::size_t i, double v) {
  if (top.count == 0) {
    top.best = i;
    top.first = v;
  } else if (v > top.first) {
    top.second = top.first;
    top.first = v;
    top.best = i;
  } else if (top.count == 1 || v > top.second) {
    top.second = v;
  }
  ++top.count;
}

// The best sequence's advantage for a group of two or more with moments m (its std is
// scaled by when scale_by_std); 0 when the maximum is tied.
CASCADE_RL_HD inline double passk_advantage(const passk_top& top, const group_moments& m,
                                            bool scale_by_std, std_estimator estimator,
                                            double epsilon, epsilon_placement epsilon_at) {
  const double gap = top.first - top.second;
  if (gap == 0.0) return 0.0;
  if (!scale_by_std) return gap;
  return gap / grpo_divisor(group_std(m, estimator), epsilon, epsilon_at);
}

// One group scores[first, last) into advantages[first, last): 0 everywhere but the best
// sequence. A zeroed group (zero_group) and a group of one get 0. scores finite unless
// zero_group. The options' singleton and nonfinite rules are the caller's (they decide
// zero_group and refuse what they refuse).
template <class T>
CASCADE_RL_HD void passk_group(const T* scores, std::size_t first, std::size_t last,
                               bool zero_group, const grpo_passk_options& p, T* advantages) {
  for (std::size_t s = first; s < last; ++s) advantages[s] = T(0);
  if (zero_group || last - first < 2) return;
  const group_moments m = group_moments_of(scores, first, last, p.accumulation);
  passk_top top;
  for (std::size_t s = first; s < last; ++s) passk_add(top, s, static_cast<double>(scores[s]));
  advantages[top.best] =
      static_cast<T>(passk_advantage(top, m, p.scale_by_std, p.estimator, p.epsilon, p.epsilon_at));
}

}  // namespace cascade_rl::terms
