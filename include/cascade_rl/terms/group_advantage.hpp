#pragma once
// Which of the group formulas (terms/group_moments.hpp) an estimator applies to each
// group, decided once per group from its moments: GRPO (veRL/TRL's group-normalised
// score), RLOO and REINFORCE++-baseline. The host algorithms, the Thrust portable path
// and the CUDA kernels all call plan_group and advantage_of; the options of each
// algorithm become group_params in its own header (group_params_of).

#include <cstddef>

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/group_moments.hpp"

namespace cascade_rl::terms {

// statistics: group_statistics (no advantages); baseline: REINFORCE++-baseline's
// per-sequence score - mean (RLOO's plan with factor 1); leave_one_out:
// leave_one_out_statistics (two outputs, see leave_one_out_of).
enum class group_kind : int { statistics, grpo, rloo, baseline, leave_one_out };

// The options of every group estimator as plain values a kernel can take by copy.
struct group_params {
  group_kind kind = group_kind::grpo;
  bool scale_by_std = true;
  epsilon_placement epsilon_at = epsilon_placement::added_to_std;
  std_estimator estimator = std_estimator::unbiased;
  singleton_rule singleton = singleton_rule::error;
  nonfinite_rule nonfinite = nonfinite_rule::error;
  mean_accumulation accumulation = mean_accumulation::double_precision;
  double epsilon = 1e-6;
  bool refuse_singletons = false;  // a group of one is an input error
};

// How every value of a group maps to its advantage: a = deviation(r) / divisor (GRPO),
// a = factor * deviation(r) (RLOO, baseline), a = r / divisor or r (a singleton's raw
// score, veRL's mean 0 / std 1), or 0.
struct group_plan {
  bool zero = false;   // every advantage is 0
  bool raw = false;    // a = r (RLOO, baseline) or r / divisor (GRPO)
  double divisor = 1;  // GRPO: a = deviation / divisor
  double factor = 1;   // RLOO: a = factor * deviation, n / (n - 1)
};

// GRPO's divisor for a group of count >= 2 values, not all equal, whose squared deviations
// sum to m2 (a double, or lanes of groups: terms/group_moments.hpp).
template <class V>
CASCADE_RL_HD inline void grpo_spread_divisor(const V& m2, std::size_t count, const group_params& p,
                                              V& divisor) {
  if (!p.scale_by_std) {
    divisor = V{} + 1.0;  // 1 in every lane
    return;
  }
  V std = m2;
  std_of_spread(m2, count, p.estimator, std);
  grpo_divisor_of(std, p.epsilon, p.epsilon_at, divisor);
}

// m: the group's moments, or for a group the caller zeroes (a non-finite one under
// nonfinite_rule::zero_group) just its count with m.nonfinite set. A group of one is a
// zero-variance group (group_moments_of) unless a singleton rule says otherwise.
CASCADE_RL_HD inline group_plan plan_group(const group_moments& m, const group_params& p) {
  group_plan plan;
  const bool singleton = m.count == 1;
  if (p.kind == group_kind::rloo || p.kind == group_kind::baseline) {
    if (singleton && !m.nonfinite) {
      plan.raw = p.singleton == singleton_rule::raw_score;
      plan.zero = !plan.raw;
      return plan;
    }
    if (m.nonfinite || m.zero_variance) {
      plan.zero = true;
      return plan;
    }
    const double n = static_cast<double>(m.count);
    plan.factor = p.kind == group_kind::rloo ? n / (n - 1.0) : 1.0;  // 1.0 * d == d exactly
    return plan;
  }
  // GRPO
  if (m.nonfinite || (singleton && p.singleton == singleton_rule::zero_advantage)) {
    plan.zero = true;
    return plan;
  }
  if (singleton && p.singleton == singleton_rule::raw_score) {
    plan.raw = true;
    plan.divisor = p.scale_by_std ? grpo_divisor(1.0, p.epsilon, p.epsilon_at) : 1.0;
    return plan;
  }
  if (m.zero_variance || m.count < 2) {  // count 0: an empty group, nothing to scale
    plan.zero = true;
    return plan;
  }
  grpo_spread_divisor(m.m2, m.count, p, plan.divisor);
  return plan;
}

// The advantage of value r of the group (in T, as the algorithms write it).
template <class T>
CASCADE_RL_HD inline T advantage_of(T r, const group_moments& m, const group_plan& plan,
                                    const group_params& p) {
  if (plan.zero) return T(0);
  const bool rloo_like = p.kind == group_kind::rloo || p.kind == group_kind::baseline;
  if (plan.raw) {
    if (rloo_like) return r;
    return static_cast<T>(static_cast<double>(r) / plan.divisor);
  }
  const double d = deviation(r, m.mean, p.accumulation);
  if (rloo_like) return static_cast<T>(plan.factor * d);
  return static_cast<T>(d / plan.divisor);
}

}  // namespace cascade_rl::terms

// Each estimator's options as the plain values above.
namespace cascade_rl::detail {

// A group's statistic from its moments (host, portable path and kernels alike).
CASCADE_RL_HD inline group_statistic statistic_of(const terms::group_moments& m, std_estimator estimator) {
  group_statistic s;
  s.mean = m.mean;
  s.std = terms::group_std(m, estimator);
  s.min = m.min;
  s.max = m.max;
  s.count = m.count;
  s.zero_variance = m.zero_variance;
  return s;
}

inline terms::group_params group_params_of(const group_statistics_options& o) {
  terms::group_params p;
  p.kind = terms::group_kind::statistics;
  p.estimator = o.estimator;
  p.accumulation = o.accumulation;
  p.nonfinite = nonfinite_rule::error;
  return p;
}

inline terms::group_params group_params_of(const leave_one_out_options& o) {
  terms::group_params p;
  p.kind = terms::group_kind::leave_one_out;
  p.estimator = o.estimator;
  p.nonfinite = nonfinite_rule::error;
  p.refuse_singletons = true;  // leave_one_out_statistics always needs two
  return p;
}

inline terms::group_params group_params_of(const grpo_options& o) {
  const bool needs_two = o.scale_by_std && o.estimator == std_estimator::unbiased;
  return {terms::group_kind::grpo, o.scale_by_std, o.epsilon_at, o.estimator, o.singleton,
          o.nonfinite, o.accumulation, o.epsilon,
          needs_two && o.singleton == singleton_rule::error};
}

// RLOO and REINFORCE++-baseline: a mean baseline whose group of one follows `singleton`.
inline terms::group_params mean_baseline_params(terms::group_kind kind, singleton_rule singleton,
                                                nonfinite_rule nonfinite,
                                                mean_accumulation accumulation) {
  terms::group_params p;
  p.kind = kind;
  p.singleton = singleton;
  p.nonfinite = nonfinite;
  p.accumulation = accumulation;
  p.refuse_singletons = singleton == singleton_rule::error;
  return p;
}

inline terms::group_params group_params_of(const rloo_options& o) {
  return mean_baseline_params(terms::group_kind::rloo, o.singleton, o.nonfinite, o.accumulation);
}

inline terms::group_params group_params_of(const reinforce_plus_plus_baseline_options& o) {
  return mean_baseline_params(terms::group_kind::baseline, o.singleton, o.nonfinite, o.accumulation);
}

}  // namespace cascade_rl::detail
