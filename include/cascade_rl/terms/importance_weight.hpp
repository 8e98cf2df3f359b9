#pragma once
// The importance weight of one token against the behaviour (rollout) policy:
//   r_t = exp(target_logp - behaviour_logp)
//   truncated:  w_t = min(r_t, cap)            (veRL's truncated IS, tis_imp_ratio_cap)
//   band_mask:  w_t = r_t inside [lo, hi], else 0 (MOPD, Nemotron-Cascade 2: [0.5, 2])
// r_t overflows to +inf for a large log-ratio; min(., cap) and the band test handle
// +inf, so no clamp is needed. exp is math::exp: the same bits on every executor.

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"

namespace cascade_rl {

enum class importance_sampling {
  none,       // w_t = 1; behaviour log-probs are not read
  truncated,  // w_t = min(r_t, cap)
  band_mask,  // w_t = r_t inside [band_low, band_high], 0 outside
};

struct importance_options {
  importance_sampling mode = importance_sampling::none;
  double cap = 2.0;        // truncated: upper bound of w_t, must be > 0
  double band_low = 0.5;   // band_mask: 0 <= band_low <= band_high
  double band_high = 2.0;
};

namespace terms {

struct importance_weight {
  double weight = 1;
  bool truncated = false;
  bool masked = false;
};

// w_t from log r_t = target_logp - behaviour_logp.
CASCADE_RL_HD inline importance_weight importance_weight_of(double log_ratio,
                                                            const importance_options& options) {
  if (options.mode == importance_sampling::none) return {};
  const double r = math::exp(log_ratio);
  if (options.mode == importance_sampling::truncated)
    return r > options.cap ? importance_weight{options.cap, true, false}
                           : importance_weight{r, false, false};
  const bool inside = options.band_low <= r && r <= options.band_high;
  return inside ? importance_weight{r, false, false} : importance_weight{0.0, false, true};
}

// The loss scaled by an importance weight (any token loss type: extra fields kept).
template <class L>
CASCADE_RL_HD L weighted(L l, const importance_weight& w) {
  l.value = l.value * w.weight;
  l.grad = l.grad * w.weight;
  return l;
}

}  // namespace terms
}  // namespace cascade_rl
