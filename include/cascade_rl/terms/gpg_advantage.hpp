#pragma once
// GPG's advantage (Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning
// Baseline for Model Reasoning"; veRL's compute_gpg_outcome_advantage):
//   A_i = alpha * (s_i - mean_g(s)) / f_norm,   alpha = N / max(#{i : s_i != 0}, 1)
// where N and the count of non-zero scores run over the whole batch: alpha rescales the
// gradient for the share of samples that carry a reward. A group's mean is
// terms::group_moments_of's (the host's order), the same on every executor.

#include <cstddef>

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"
#include "cascade_rl/terms/group_moments.hpp"

namespace cascade_rl::terms {

// alpha / f_norm for a batch of `batch` scores of which `nonzero` are not 0.
CASCADE_RL_HD inline double gpg_scale(std::size_t batch, std::size_t nonzero, double f_norm) {
  const double alpha =
      static_cast<double>(batch) / static_cast<double>(nonzero < 1 ? std::size_t{1} : nonzero);
  return alpha / f_norm;
}

// What a group's sequences get: 0, scale * s (a singleton under raw_score: veRL's mean 0)
// or scale * (s - mean). m: the group's moments (for a group zeroed for a non-finite
// score, its count with m.nonfinite set).
struct gpg_plan {
  bool zero = false;
  bool raw = false;
};

CASCADE_RL_HD inline gpg_plan plan_gpg(const group_moments& m, singleton_rule singleton) {
  gpg_plan p;
  if (m.nonfinite || m.count == 0) {
    p.zero = true;
  } else if (m.count == 1) {
    p.raw = singleton == singleton_rule::raw_score;
    p.zero = !p.raw;
  } else {
    p.zero = m.zero_variance;  // exactly 0, not a rounding residue of s - mean
  }
  return p;
}

template <class T>
CASCADE_RL_HD inline T gpg_advantage(T score, const group_moments& m, const gpg_plan& p,
                                     double scale, mean_accumulation accumulation) {
  if (p.zero) return T(0);
  const double d = p.raw ? static_cast<double>(score) : deviation(score, m.mean, accumulation);
  return static_cast<T>(scale * d);
}

}  // namespace cascade_rl::terms
