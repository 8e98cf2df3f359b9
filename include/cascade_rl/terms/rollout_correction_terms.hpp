#pragma once
// The per-token formulas of the rollout correction (algorithms/rollout_correction.hpp), as
// host-device functions so that every executor evaluates the same expressions: exp is
// core/elementary_functions.hpp's, products that feed a sum are rounded alone
// (math::detail::product_rn), so the GPU gives the host's bits.

#include <cmath>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/rollout_correction.hpp"

namespace cascade_rl::terms {

// veRL's SAFETY_BOUND: log-ratios are clamped to +-20 before exp.
inline constexpr double rollout_safety_bound = 20.0;

// max and min as selects: for operands that are not NaN they give what glibc's fmax and
// fmin give (x86's maxsd / minsd: the first operand when it compares greater / less, else
// the second, signed zeros included), and a NaN first operand yields the second, as
// fmax / fmin do. Unlike those libm calls they inline, so the token loops stay in
// registers (the calls were a fifth of the host correction's time).
CASCADE_RL_HD inline double rollout_max(double a, double b) { return a > b ? a : b; }
CASCADE_RL_HD inline double rollout_min(double a, double b) { return a < b ? a : b; }

CASCADE_RL_HD inline double rollout_safe_log_ratio(double log_ratio) {
  return rollout_min(rollout_max(log_ratio, -rollout_safety_bound), rollout_safety_bound);
}

// The raw importance weight of a log-ratio (a token's, or a row's sum).
CASCADE_RL_HD inline double rollout_raw_weight(double log_ratio) {
  return math::exp(rollout_safe_log_ratio(log_ratio));
}

// The weight applied: truncated at upper (icepop false), or the raw weight inside
// [lower, upper] and 0 outside (icepop true).
CASCADE_RL_HD inline double rollout_applied_weight(double raw, double lower, double upper,
                                                   bool icepop) {
  const bool inside = raw >= lower && raw <= upper;
  return icepop ? (inside ? raw : 0.0) : rollout_min(raw, upper);
}

// A token's divergence statistic (k1, k2 or k3).
// `raw` is rollout_raw_weight(log_ratio), exp of the clamped log-ratio, which k3 reuses.
CASCADE_RL_HD inline double rollout_rs_token_statistic(double log_ratio, double raw,
                                                       rollout_rs_statistic statistic) {
  const double d = rollout_safe_log_ratio(log_ratio);
  if (statistic == rollout_rs_statistic::k1) return -d;
  if (statistic == rollout_rs_statistic::k2) return 0.5 * math::detail::product_rn(d, d);
  return raw - 1.0 - d;
}

// Whether a statistic passes: k1 within [log_lower, log_upper], k2 / k3 at most upper
// (pass the bounds the statistic compares: logs for k1).
CASCADE_RL_HD inline bool rollout_rs_keeps(double statistic_value, double metric_lower,
                                           double metric_upper, bool two_sided) {
  return statistic_value <= metric_upper && (!two_sided || statistic_value >= metric_lower);
}

}  // namespace cascade_rl::terms
