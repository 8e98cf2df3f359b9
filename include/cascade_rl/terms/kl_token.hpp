#pragma once
// Per-token estimators of KL(pi || pi_ref) from the sampled token's log-probs, with
// their derivative with respect to logp. Names follow veRL (core_algos.py, kl_penalty)
// and Schulman, "Approximating KL Divergence" (2020):
//   k1  ("kl")          logp - ref
//   abs                 |logp - ref|          d/dlogp = sign(logp - ref), 0 at 0 (torch)
//   k2  ("mse")         0.5 * (logp - ref)^2
//   k3  ("low_var_kl")  exp(x) - x - 1 with x = ref - logp; d/dlogp = 1 - exp(x)
// k3 is unbiased and non-negative but exp(x) explodes when the reference puts much
// more mass on the token than the policy (x large). veRL clamps x to +-20 and the
// result to +-10; both clamps are options here, and the derivative is 0 wherever a
// clamp is active.
// veRL's straight-through "+" types (k3+ etc.) keep an estimator's value but take the
// gradient of k2, logp - ref (unbiased for the KL's gradient), even where k3's clamps
// act: kl_options::straight_through.

#include <cstdint>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/kl.hpp"
#include "cascade_rl/terms/token_loss.hpp"

namespace cascade_rl {

namespace terms {

// One term per estimator, each free of branches (masks and blends, see
// math::detail::mask_of) so that a host loop of one vectorises; kl_token dispatches on
// the options for callers that take the estimator at run time.
CASCADE_RL_HD inline token_loss k1_token(double logp, double ref) { return {logp - ref, 1.0}; }

// d/dlogp = sign(logp - ref), 0 at 0 (torch's sign).
CASCADE_RL_HD inline token_loss abs_token(double logp, double ref) {
  using math::detail::blend;
  using math::detail::mask_of;
  const double d = logp - ref;
  // The sign as (d > 0) - (d < 0): nested blends of constants are threaded into branches.
  return {math::abs(d), blend(mask_of(d > 0), 1.0, 0.0) - blend(mask_of(d < 0), 1.0, 0.0)};
}

CASCADE_RL_HD inline token_loss k2_token(double logp, double ref) {
  const double d = logp - ref;
  return {0.5 * d * d, d};
}

// Clamps go one bound after the other (the nested clamp's value: -bound < bound).
CASCADE_RL_HD inline token_loss k3_token(double logp, double ref, double input_clamp,
                                         double output_clamp) {
  using math::detail::blend;
  using math::detail::mask_of;
  const double raw = ref - logp;
  const std::uint64_t in_clamped = mask_of(raw > input_clamp) | mask_of(raw < -input_clamp);
  double x = blend(mask_of(raw > input_clamp), input_clamp, raw);
  x = blend(mask_of(x < -input_clamp), -input_clamp, x);
  const double e = math::exp(x);
  const double k = e - x - 1.0;
  const std::uint64_t out_clamped = mask_of(k > output_clamp) | mask_of(k < -output_clamp);
  double value = blend(mask_of(k > output_clamp), output_clamp, k);
  value = blend(mask_of(value < -output_clamp), -output_clamp, value);
  // dk/dlogp = (e - 1) * dx/dlogp = 1 - e, 0 wherever a clamp is active: a 0/1 factor
  // rather than a blend, because GCC 12 threads the blend's known-zero mask into a
  // branch that skips 1 - e (and does not vectorise the loop); + 0.0 turns the -0.0 of a
  // negative 1 - e times 0 into the +0.0 the blend gave.
  const double active = blend(in_clamped | out_clamped, 0.0, 1.0);
  return {value, (1.0 - e) * active + 0.0};
}

// k's value with k2's gradient: the straight-through estimate (veRL's "+" types).
CASCADE_RL_HD inline token_loss straight_through(token_loss k, double logp, double ref) {
  return {k.value, logp - ref};
}

CASCADE_RL_HD inline token_loss estimator_token(double logp, double ref,
                                                const kl_options& options) {
  switch (options.estimator) {
    case kl_estimator::k1: return k1_token(logp, ref);
    case kl_estimator::abs: return abs_token(logp, ref);
    case kl_estimator::k2: return k2_token(logp, ref);
    case kl_estimator::k3:
      return k3_token(logp, ref, options.input_clamp, options.output_clamp);
  }
  return {};
}

CASCADE_RL_HD inline token_loss kl_token(double logp, double ref, const kl_options& options) {
  const token_loss k = estimator_token(logp, ref, options);
  return options.straight_through ? straight_through(k, logp, ref) : k;
}

}  // namespace terms
}  // namespace cascade_rl
