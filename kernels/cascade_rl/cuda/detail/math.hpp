#pragma once
// The per-group and per-row formulas of the host core (group moments and advantages,
// whitening, the online log-sum-exp), callable from device code and from the portable
// Thrust path. Each mirrors a host function named in its comment; they are next to move
// into include/cascade_rl/terms/ as the token losses' terms did (issue 16). The options
// structs of the host core are turned into the plain parameter structs below on the host
// (they hold std::optional), and travel to kernels by value.

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include <cstddef>
#include <cstdint>

#include "cascade_rl/algorithms/advantage_options.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/cuda/device_layout.hpp"

namespace cascade_rl::cuda::detail {

template <class T>
CASCADE_RL_HD constexpr T clamp(T x, T lo, T hi) {
  return x < lo ? lo : (hi < x ? hi : x);
}
template <class T>
CASCADE_RL_HD constexpr T min_of(T a, T b) { return b < a ? b : a; }
template <class T>
CASCADE_RL_HD constexpr T max_of(T a, T b) { return a < b ? b : a; }

// ---- group advantages ---------------------------------------------------------------

// baseline: REINFORCE++-baseline's per-sequence score - mean (RLOO's plan with factor 1);
// leave_one_out: leave_one_out_statistics (two outputs, see leave_one_out_of).
enum class group_kind : int { statistics, grpo, rloo, baseline, leave_one_out };

struct group_params {
  group_kind kind = group_kind::grpo;
  bool scale_by_std = true;
  bool epsilon_inside_sqrt = false;
  bool unbiased = true;
  int singleton = 0;     // singleton_rule
  int nonfinite = 0;     // nonfinite_rule
  int accumulation = 0;  // mean_accumulation
  double epsilon = 1e-6;
  bool refuse_singletons = false;  // the host core would refuse a group of one
};

inline group_params to_params(const grpo_options& o) {
  const bool unbiased = o.estimator == std_estimator::unbiased;
  return {group_kind::grpo, o.scale_by_std, o.epsilon_at == epsilon_placement::inside_sqrt,
          unbiased, static_cast<int>(o.singleton), static_cast<int>(o.nonfinite),
          static_cast<int>(o.accumulation), o.epsilon,
          o.scale_by_std && unbiased && o.singleton == singleton_rule::error};
}
inline group_params to_params(const rloo_options& o) {
  group_params p;
  p.kind = group_kind::rloo;
  p.singleton = static_cast<int>(o.singleton);
  p.nonfinite = static_cast<int>(o.nonfinite);
  p.accumulation = static_cast<int>(o.accumulation);
  p.refuse_singletons = o.singleton == singleton_rule::error;
  return p;
}
inline group_params to_params(const group_statistics_options& o) {
  group_params p;
  p.kind = group_kind::statistics;
  p.unbiased = o.estimator == std_estimator::unbiased;
  p.accumulation = static_cast<int>(o.accumulation);
  p.nonfinite = static_cast<int>(nonfinite_rule::error);
  return p;
}

inline group_params to_params(const reinforce_plus_plus_baseline_options& o) {
  group_params p;
  p.kind = group_kind::baseline;
  p.singleton = static_cast<int>(o.singleton);
  p.nonfinite = static_cast<int>(o.nonfinite);
  p.accumulation = static_cast<int>(o.accumulation);
  p.refuse_singletons = o.singleton == singleton_rule::error;
  return p;
}
inline group_params to_params(const leave_one_out_options& o) {
  group_params p;
  p.kind = group_kind::leave_one_out;
  p.unbiased = o.estimator == std_estimator::unbiased;
  p.nonfinite = static_cast<int>(nonfinite_rule::error);
  p.refuse_singletons = true;  // leave_one_out_statistics always needs two
  return p;
}

CASCADE_RL_HD inline bool is_float32(int accumulation) {
  return accumulation != static_cast<int>(mean_accumulation::double_precision);
}

// detail::deviation of group_statistics.hpp.
template <class T>
CASCADE_RL_HD inline double deviation(T value, double mean, int accumulation) {
  if (is_float32(accumulation))
    return static_cast<double>(static_cast<float>(value) - static_cast<float>(mean));
  return static_cast<double>(value) - mean;
}

// The mean from the group's sum in double (or its sequential float32 sum), as
// detail::group_mean does.
CASCADE_RL_HD inline double mean_of(double sum, float float_sum, std::size_t n, int accumulation) {
  if (accumulation == static_cast<int>(mean_accumulation::float32_sequential))
    return static_cast<double>(float_sum / static_cast<float>(n));
  if (accumulation == static_cast<int>(mean_accumulation::float32_rounded_sum))
    return static_cast<double>(static_cast<float>(sum) / static_cast<float>(n));
  return sum / static_cast<double>(n);
}

// What a group's moments turn into. The finaliser gets the moments after pass two.
struct group_moments {
  double mean = 0, m2 = 0, min = 0, max = 0;
  std::size_t count = 0;
  bool zero_variance = false;
  bool nonfinite = false;
};

// detail::variance_divisor of group_statistics.hpp.
CASCADE_RL_HD inline double variance_divisor(unsigned long long n, bool unbiased) {
  return unbiased ? static_cast<double>(n) - 1.0 : static_cast<double>(n);
}

CASCADE_RL_HD inline double std_of(const group_moments& m, bool unbiased) {
  if (m.zero_variance || m.count < 2) return 0.0;
  return ::cuda::std::sqrt(m.m2 / variance_divisor(m.count, unbiased));
}

// How every value of a group maps to its advantage: a = scale * deviation(r) (or
// a = raw r for veRL's singleton raw score). Decided once per group.
struct group_plan {
  bool zero = false;    // every advantage is 0
  bool raw = false;     // a = r (RLOO raw score) or r / divisor (GRPO raw score)
  double divisor = 1;   // a = deviation / divisor
  double factor = 1;    // a = factor * deviation (RLOO)
};

CASCADE_RL_HD inline double grpo_scale(double std, const group_params& p) {
  return p.epsilon_inside_sqrt ? ::cuda::std::sqrt(std * std + p.epsilon) : std + p.epsilon;
}

// grpo_advantages / rloo_advantages of the host core, group by group.
CASCADE_RL_HD inline group_plan plan_group(const group_moments& m, const group_params& p) {
  group_plan plan;
  // A non-finite group is zeroed (under nonfinite_rule::error it is also reported, and
  // the convenience layer refuses the batch as the host core does).
  const bool zero_group = m.nonfinite;
  const bool singleton = m.count == 1;
  if (p.kind == group_kind::rloo || p.kind == group_kind::baseline) {
    if (singleton && !zero_group) {
      plan.raw = p.singleton == static_cast<int>(singleton_rule::raw_score);
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
  if (zero_group || (singleton && p.singleton == static_cast<int>(singleton_rule::zero_advantage))) {
    plan.zero = true;
    return plan;
  }
  if (singleton && p.singleton == static_cast<int>(singleton_rule::raw_score)) {
    plan.raw = true;
    plan.divisor = p.scale_by_std ? grpo_scale(1.0, p) : 1.0;
    return plan;
  }
  if (m.zero_variance) {
    plan.zero = true;
    return plan;
  }
  plan.divisor = p.scale_by_std ? grpo_scale(std_of(m, p.unbiased), p) : 1.0;
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
  const double d = deviation(r, m.mean, p.accumulation);
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

// leave_one_out_statistics of group_statistics.hpp for value r of a group with moments m
// (double-precision mean): the mean and std of the group's other values, by downdating
// the group's moments. A zero-variance group (a group of one included) gives r and 0.
template <class T>
struct leave_one_out_value {
  T mean;
  T std;
};

template <class T>
CASCADE_RL_HD inline leave_one_out_value<T> leave_one_out_of(T r, const group_moments& m, bool unbiased) {
  if (m.zero_variance) return {r, T(0)};
  const double n = static_cast<double>(m.count);
  const double d = static_cast<double>(r) - m.mean;
  leave_one_out_value<T> out;
  out.mean = static_cast<T>(m.mean - d / (n - 1.0));
  const unsigned long long others = m.count - 1;
  const double others_m2 = max_of(0.0, m.m2 - d * d * n / (n - 1.0));  // std::max(0.0, .)
  out.std = others < 2 ? T(0)
                       : static_cast<T>(::cuda::std::sqrt(others_m2 / variance_divisor(others, unbiased)));
  return out;
}

// ---- token advantages -----------------------------------------------------------------

// distillation_advantages of distillation_advantages.hpp (in T, as the host core).
template <class T>
CASCADE_RL_HD inline T distillation_advantage(T teacher, T student, bool valid) {
  return valid ? teacher - student : T(0);
}

// One backward step of discounted_returns (reinforce_plus_plus.hpp): the return of a
// token from its reward and the running return after it. The running return becomes
// this return on a valid token and 0 on a masked one.
CASCADE_RL_HD inline double discounted_return(double reward, double gamma, double run) {
  return reward + gamma * run;
}

// detail::whiten_valid_tokens of reinforce_plus_plus.hpp: the batch mean from the sum and
// count of the valid tokens, the inverse scale from the sum of squared deviations, and
// each whitened value.
struct whitening_params {
  double epsilon = 1e-8;
  bool unbiased = true;
  bool shift_mean = true;
  int accumulation = 0;  // mean_accumulation
};

inline whitening_params to_params(const whitening_options& o) {
  return {o.epsilon, o.estimator == std_estimator::unbiased, o.shift_mean,
          static_cast<int>(o.accumulation)};
}

CASCADE_RL_HD inline double whitening_mean(double sum, unsigned long long count,
                                           const whitening_params& p) {
  return is_float32(p.accumulation)
             ? static_cast<double>(static_cast<float>(sum) / static_cast<float>(count))
             : sum / static_cast<double>(count);
}

CASCADE_RL_HD inline double whitening_inv_scale(double squares, unsigned long long count,
                                                const whitening_params& p) {
  const double variance = squares / variance_divisor(count, p.unbiased);
  return 1.0 / ::cuda::std::sqrt(variance + p.epsilon);
}

// The shift is added even when it is 0.0, as the host core does (-0.0 + 0.0 is +0.0).
template <class T>
CASCADE_RL_HD inline T whitened(T value, double mean, double inv_scale, const whitening_params& p) {
  const double shift = p.shift_mean ? 0.0 : mean;
  return static_cast<T>(deviation(value, mean, p.accumulation) * inv_scale + shift);
}

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
