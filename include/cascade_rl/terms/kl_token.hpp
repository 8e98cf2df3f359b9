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

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/terms/token_loss.hpp"

namespace cascade_rl {

enum class kl_estimator { k1, abs, k2, k3 };

struct kl_options {
  kl_estimator estimator = kl_estimator::k3;
  double input_clamp = 20.0;   // k3 only: x = ref - logp clamped to +-input_clamp
  double output_clamp = 10.0;  // k3 only: the estimate clamped to +-output_clamp
};

namespace terms {

CASCADE_RL_HD inline token_loss kl_token(double logp, double ref, const kl_options& options) {
  const double d = logp - ref;
  switch (options.estimator) {
    case kl_estimator::k1: return {d, 1.0};
    case kl_estimator::abs: return {math::abs(d), d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0)};
    case kl_estimator::k2: return {0.5 * d * d, d};
    case kl_estimator::k3: {
      double x = ref - logp;
      const double in = options.input_clamp;
      const bool in_clamped = x > in || x < -in;
      x = x < -in ? -in : (x > in ? in : x);
      const double e = math::exp(x);
      const double k = e - x - 1.0;
      const double out = options.output_clamp;
      if (k > out || k < -out) return {k < -out ? -out : out, 0.0};
      // dk/dlogp = (e - 1) * dx/dlogp = 1 - e
      return {k, in_clamped ? 0.0 : 1.0 - e};
    }
  }
  return {};
}

}  // namespace terms
}  // namespace cascade_rl
