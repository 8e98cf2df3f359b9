#pragma once
// The importance weight of one token against the behaviour (rollout) policy:
//   r_t = exp(target_logp - behaviour_logp)
//   truncated:  w_t = min(r_t, cap)            (veRL's truncated IS, tis_imp_ratio_cap)
//   band_mask:  w_t = r_t inside [lo, hi], else 0 (MOPD, Nemotron-Cascade 2: [0.5, 2])
// r_t overflows to +inf for a large log-ratio; min(., cap) and the band test handle
// +inf, so no clamp is needed. exp is math::exp: the same bits on every executor.

#include <cstdint>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/importance.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"

namespace cascade_rl {

namespace terms {

struct importance_weight {
  double weight = 1;
  bool truncated = false;
  bool masked = false;
};

// w_t from log r_t = target_logp - behaviour_logp. Free of branches (masks and blends,
// see math::detail::mask_of) so that a host loop of it vectorises.
CASCADE_RL_HD inline importance_weight importance_weight_of(double log_ratio,
                                                            const importance_options& options) {
  using math::detail::blend;
  using math::detail::mask_of;
  using math::detail::parameter_mask;
  const double r = math::exp(log_ratio);
  const std::uint64_t truncated =
      parameter_mask(options.mode == importance_sampling::truncated) & mask_of(r > options.cap);
  const std::uint64_t masked = parameter_mask(options.mode == importance_sampling::band_mask) &
                               ~(mask_of(options.band_low <= r) & mask_of(r <= options.band_high));
  const double weight = blend(truncated, options.cap, blend(masked, 0.0, r));
  return {blend(parameter_mask(options.mode == importance_sampling::none), 1.0, weight),
          (truncated & 1) != 0, (masked & 1) != 0};
}

// The token loss (any token loss type: extra fields kept) scaled by the importance
// weight of log r_t, the truncation or band drop counted into the metrics. For
// importance_sampling::none the callers skip it (and do not read a behaviour log-prob).
template <class L>
CASCADE_RL_HD L importance_weighted(L l, double log_ratio, const importance_options& options,
                                    policy_loss_metrics& metrics) {
  const importance_weight w = importance_weight_of(log_ratio, options);
  metrics.importance_truncated += w.truncated;
  metrics.importance_masked += w.masked;
  l.value = l.value * w.weight;
  l.grad = l.grad * w.weight;
  return l;
}

// The token loss scaled by a weight the caller computed (veRL's rollout_is_weights, a
// stop-gradient factor): value and gradient alike.
template <class L>
CASCADE_RL_HD L given_weighted(L l, double weight) {
  l.value = l.value * weight;
  l.grad = l.grad * weight;
  return l;
}

}  // namespace terms
}  // namespace cascade_rl
