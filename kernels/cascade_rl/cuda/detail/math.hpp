#pragma once
// What the kernels and the portable Thrust path still hold of their own: the per-group
// dispatch (which estimator applies which of the terms/group_moments.hpp formulas, as
// the host algorithms' group loops decide it), distillation's token difference, and the
// device's online log-sum-exp (float, __expf: not yet the host's 16-lane form, so
// log-probs agree within float tolerance, not bit for bit). Every per-token and
// per-group formula itself is in include/cascade_rl/terms/, called from here and from
// the host alike.

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include <cstddef>
#include <cstdint>

#include "cascade_rl/algorithms/advantage_options.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/terms/discounted_return.hpp"
#include "cascade_rl/terms/group_moments.hpp"
#include "cascade_rl/terms/whitening.hpp"

namespace cascade_rl::cuda::detail {

template <class T>
CASCADE_RL_HD constexpr T min_of(T a, T b) { return b < a ? b : a; }
template <class T>
CASCADE_RL_HD constexpr T max_of(T a, T b) { return a < b ? b : a; }

// ---- group advantages ---------------------------------------------------------------
// The formulas (moments, std, GRPO's divisor, leave-one-out) are terms/group_moments.hpp;
// what is here decides, per group, which of them an estimator applies.

using terms::group_moments;

// baseline: REINFORCE++-baseline's per-sequence score - mean (RLOO's plan with factor 1);
// leave_one_out: leave_one_out_statistics (two outputs, see terms::leave_one_out_of).
enum class group_kind : int { statistics, grpo, rloo, baseline, leave_one_out };

struct group_params {
  group_kind kind = group_kind::grpo;
  bool scale_by_std = true;
  epsilon_placement epsilon_at = epsilon_placement::added_to_std;
  std_estimator estimator = std_estimator::unbiased;
  singleton_rule singleton = singleton_rule::error;
  nonfinite_rule nonfinite = nonfinite_rule::error;
  mean_accumulation accumulation = mean_accumulation::double_precision;
  double epsilon = 1e-6;
  bool refuse_singletons = false;  // the host core would refuse a group of one
};

inline group_params to_params(const grpo_options& o) {
  const bool unbiased = o.estimator == std_estimator::unbiased;
  return {group_kind::grpo, o.scale_by_std, o.epsilon_at, o.estimator, o.singleton, o.nonfinite,
          o.accumulation, o.epsilon, o.scale_by_std && unbiased && o.singleton == singleton_rule::error};
}
inline group_params to_params(const rloo_options& o) {
  group_params p;
  p.kind = group_kind::rloo;
  p.singleton = o.singleton;
  p.nonfinite = o.nonfinite;
  p.accumulation = o.accumulation;
  p.refuse_singletons = o.singleton == singleton_rule::error;
  return p;
}
inline group_params to_params(const group_statistics_options& o) {
  group_params p;
  p.kind = group_kind::statistics;
  p.estimator = o.estimator;
  p.accumulation = o.accumulation;
  p.nonfinite = nonfinite_rule::error;
  return p;
}
inline group_params to_params(const reinforce_plus_plus_baseline_options& o) {
  group_params p;
  p.kind = group_kind::baseline;
  p.singleton = o.singleton;
  p.nonfinite = o.nonfinite;
  p.accumulation = o.accumulation;
  p.refuse_singletons = o.singleton == singleton_rule::error;
  return p;
}
inline group_params to_params(const leave_one_out_options& o) {
  group_params p;
  p.kind = group_kind::leave_one_out;
  p.estimator = o.estimator;
  p.nonfinite = nonfinite_rule::error;
  p.refuse_singletons = true;  // leave_one_out_statistics always needs two
  return p;
}

// How every value of a group maps to its advantage: a = scale * deviation(r) (or
// a = raw r for veRL's singleton raw score). Decided once per group.
struct group_plan {
  bool zero = false;    // every advantage is 0
  bool raw = false;     // a = r (RLOO raw score) or r / divisor (GRPO raw score)
  double divisor = 1;   // a = deviation / divisor
  double factor = 1;    // a = factor * deviation (RLOO)
};

// grpo_advantages / rloo_advantages of the host core, group by group.
CASCADE_RL_HD inline group_plan plan_group(const group_moments& m, const group_params& p) {
  group_plan plan;
  // A non-finite group is zeroed (under nonfinite_rule::error it is also reported, and
  // the convenience layer refuses the batch as the host core does).
  const bool zero_group = m.nonfinite;
  const bool singleton = m.count == 1;
  if (p.kind == group_kind::rloo || p.kind == group_kind::baseline) {
    if (singleton && !zero_group) {
      plan.raw = p.singleton == singleton_rule::raw_score;
      plan.zero = !plan.raw;
      return plan;
    }
    if (zero_group || m.zero_variance) {
      plan.zero = true;
      return plan;
    }
    const double n = static_cast<double>(m.count);
    plan.factor = p.kind == group_kind::rloo ? n / (n - 1.0) : 1.0;  // 1.0 * d == d exactly
    return plan;
  }
  // GRPO
  if (zero_group || (singleton && p.singleton == singleton_rule::zero_advantage)) {
    plan.zero = true;
    return plan;
  }
  if (singleton && p.singleton == singleton_rule::raw_score) {
    plan.raw = true;
    plan.divisor = p.scale_by_std ? terms::grpo_divisor(1.0, p.epsilon, p.epsilon_at) : 1.0;
    return plan;
  }
  if (m.zero_variance) {
    plan.zero = true;
    return plan;
  }
  plan.divisor = p.scale_by_std
                     ? terms::grpo_divisor(terms::group_std(m, p.estimator), p.epsilon, p.epsilon_at)
                     : 1.0;
  return plan;
}

template <class T>
CASCADE_RL_HD inline T advantage_of(T r, const group_moments& m, const group_plan& plan,
                                    const group_params& p) {
  if (plan.zero) return T(0);
  const bool rloo_like = p.kind == group_kind::rloo || p.kind == group_kind::baseline;
  if (plan.raw) {
    if (rloo_like) return r;
    return static_cast<T>(static_cast<double>(r) / plan.divisor);
  }
  const double d = terms::deviation(r, m.mean, p.accumulation);
  if (rloo_like) return static_cast<T>(plan.factor * d);
  return static_cast<T>(d / plan.divisor);
}

// Whether a group needs its moments at all (GRPO singletons under zero/raw rules and
// non-finite groups under zero_group do not).
CASCADE_RL_HD inline bool needs_moments(const group_moments& m, const group_params& p) {
  if (m.nonfinite) return false;
  if (p.kind == group_kind::statistics) return true;
  return m.count > 1 && !m.zero_variance;
}

// ---- token advantages -----------------------------------------------------------------

// distillation_advantages of distillation_advantages.hpp (in T, as the host core).
template <class T>
CASCADE_RL_HD inline T distillation_advantage(T teacher, T student, bool valid) {
  return valid ? teacher - student : T(0);
}

using terms::discounted_return;

// ---- log-probs from logits: the online log-sum-exp ---------------------------------

// Over the values x seen so far, relative to the running maximum m:
//   s = sum exp(x - m),  w = sum exp(x - m) * (x - m).
// Then lse = m + log s and the entropy H = lse - sum p x = log s - w / s.
// Masked logits of -inf add nothing; a NaN logit makes the row NaN.
inline constexpr float minus_infinity = -::cuda::std::numeric_limits<float>::infinity();

struct lse_state {
  float m = minus_infinity;
  float s = 0;
  float w = 0;
};

// exp in float: the fast intrinsic on the device (the row sum is bandwidth-bound and
// the intrinsic's error is far below the float32 tolerance of the result).
CASCADE_RL_HD inline float lse_exp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return ::cuda::std::exp(x);
#endif
}

// Moves the state to a new, larger maximum.
CASCADE_RL_HD inline void lse_rescale(lse_state& st, float new_max) {
  if (!(new_max > st.m)) return;
  if (st.m == minus_infinity) {
    st.m = new_max;
    return;
  }
  const float d = st.m - new_max;
  const float a = lse_exp(d);
  st.w = a * (st.w + d * st.s);
  st.s *= a;
  st.m = new_max;
}

// Adds a chunk of N already-scaled values: one rescale per chunk, one exp per value.
template <int N>
CASCADE_RL_HD inline void lse_add(lse_state& st, const float (&x)[N]) {
  float chunk_max = x[0];
  for (int k = 1; k < N; ++k) chunk_max = x[k] > chunk_max ? x[k] : chunk_max;
  lse_rescale(st, chunk_max);
  if (st.m == minus_infinity) return;  // every value so far is -inf
  for (int k = 0; k < N; ++k) {
    const float d = x[k] - st.m;
    const float e = lse_exp(d);
    st.s += e;
    st.w += d == minus_infinity ? 0.0f : e * d;
  }
}

// Joins two states (fixed call order keeps results deterministic).
CASCADE_RL_HD inline lse_state lse_merge(lse_state a, const lse_state& b) {
  if (b.m == minus_infinity) return a;
  lse_rescale(a, b.m);
  const float d = b.m - a.m;  // <= 0
  const float e = lse_exp(d);
  a.s += e * b.s;
  a.w += e * (b.w + d * b.s);
  return a;
}

struct merge_lse {
  CASCADE_RL_HD lse_state operator()(const lse_state& a, const lse_state& b) const {
    return lse_merge(a, b);
  }
};

CASCADE_RL_HD inline float log_sum_exp(const lse_state& st) { return st.m + ::cuda::std::log(st.s); }
CASCADE_RL_HD inline float entropy_of(const lse_state& st) {
  return ::cuda::std::log(st.s) - st.w / st.s;
}

}  // namespace cascade_rl::cuda::detail
