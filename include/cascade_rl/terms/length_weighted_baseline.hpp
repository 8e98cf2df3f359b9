#pragma once
// OPO's group baseline (Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline";
// veRL's compute_opo_outcome_advantage): the length-weighted mean score of a group,
//   b_g = sum_i |o_i| s_i / sum_i |o_i|,   |o_i| the valid tokens of sequence i,
// and the advantage s_i - b_g on every valid token of sequence i. Each executor adds its
// group's sequences in index order with opo_add and decides with opo_group_of, so the
// host loops, the Thrust portable path and the CUDA kernel give the same bits.

#include <cstddef>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"

namespace cascade_rl::terms {

struct opo_sums {
  double weighted = 0.0;  // sum |o_i| s_i, each product rounded alone
  double length = 0.0;    // sum |o_i| (exact)
  double min = 0.0;
  double max = 0.0;
  std::size_t count = 0;
};

CASCADE_RL_HD inline void opo_add(opo_sums& acc, double score, std::size_t length) {
  const double n = static_cast<double>(length);
  acc.weighted += math::product_unfused(n, score);
  acc.length += n;
  acc.min = acc.count == 0 || score < acc.min ? score : acc.min;
  acc.max = acc.count == 0 || acc.max < score ? score : acc.max;
  ++acc.count;
}

// What every sequence of a group gets: 0 (zero), or s_i - baseline.
struct opo_group {
  bool zero = false;
  double baseline = 0.0;
};

// A group of one: its score under singleton_rule::raw_score (veRL's baseline 0), else 0
// (error refuses it before). A zero-variance group (max == min exactly), a group whose
// sequences hold no valid token and a group zeroed for a non-finite score get 0.
CASCADE_RL_HD inline opo_group opo_group_of(const opo_sums& acc, singleton_rule singleton,
                                            bool zero_group) {
  opo_group g;
  if (zero_group || acc.count == 0) {
    g.zero = true;
  } else if (acc.count == 1) {
    g.zero = singleton != singleton_rule::raw_score;
  } else if (acc.min == acc.max || acc.length == 0.0) {
    g.zero = true;
  } else {
    g.baseline = acc.weighted / acc.length;
  }
  return g;
}

// The advantage of a token of a sequence with score s: 0 on masked tokens.
template <class T>
CASCADE_RL_HD inline T opo_advantage(T score, const opo_group& g, bool valid) {
  if (!valid || g.zero) return T(0);
  return static_cast<T>(static_cast<double>(score) - g.baseline);
}

}  // namespace cascade_rl::terms
