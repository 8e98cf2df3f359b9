#pragma once
// The per-element formulas of the host core, callable from device code and from the
// portable Thrust path. Each mirrors a host function named in its comment; the host
// versions use std:: facilities that device code cannot call. The options structs of
// the host core are turned into the plain parameter structs below on the host (they
// hold std::optional), and travel to kernels by value.

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include <cstddef>
#include <cstdint>

#include "cascade_rl/algorithms/advantage_options.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/importance_weights.hpp"
#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
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

// ---- losses -------------------------------------------------------------------------

// Sums of one slice of tokens: the aggregated loss and the metrics of policy_loss_metrics.
struct loss_tally {
  double loss = 0;
  double approx_kl_sum = 0;
  unsigned long long valid_tokens = 0;
  unsigned long long clipped = 0;
  unsigned long long dual_clipped = 0;
  unsigned long long importance_truncated = 0;
  unsigned long long importance_masked = 0;
};

struct add_tallies {
  CASCADE_RL_HD loss_tally operator()(const loss_tally& a, const loss_tally& b) const {
    return {a.loss + b.loss,
            a.approx_kl_sum + b.approx_kl_sum,
            a.valid_tokens + b.valid_tokens,
            a.clipped + b.clipped,
            a.dual_clipped + b.dual_clipped,
            a.importance_truncated + b.importance_truncated,
            a.importance_masked + b.importance_masked};
  }
};

inline policy_loss_result to_result(const loss_tally& t) {
  policy_loss_result r;
  r.loss = t.loss;
  r.metrics.valid_tokens = static_cast<std::size_t>(t.valid_tokens);
  r.metrics.clipped = static_cast<std::size_t>(t.clipped);
  r.metrics.dual_clipped = static_cast<std::size_t>(t.dual_clipped);
  r.metrics.approx_kl_sum = t.approx_kl_sum;
  r.metrics.importance_truncated = static_cast<std::size_t>(t.importance_truncated);
  r.metrics.importance_masked = static_cast<std::size_t>(t.importance_masked);
  return r;
}

// The first argument of a token term that is not finite at a token, and what it was.
struct nonfinite_hit {
  int argument = -1;  // -1: every argument is finite
  bool infinite = false;
  // Records argument k when v is NaN or infinite; true when it did.
  template <class V>
  CASCADE_RL_HD bool check(int k, V v) {
    if (::cuda::std::isfinite(v)) return false;
    argument = k;
    infinite = ::cuda::std::isinf(v);
    return true;
  }
};

struct token_term {
  double value = 0;
  double grad = 0;
};

struct importance_params {
  int mode = 0;  // importance_sampling as int
  double cap = 2, band_low = 0.5, band_high = 2;
};

inline importance_params to_params(const importance_options& o) {
  return {static_cast<int>(o.mode), o.cap, o.band_low, o.band_high};
}

// detail::importance_weight_of of importance_weights.hpp.
CASCADE_RL_HD inline double importance_weight(double log_ratio, const importance_params& p,
                                              loss_tally& tally) {
  if (p.mode == static_cast<int>(importance_sampling::none)) return 1.0;
  const double r = ::cuda::std::exp(log_ratio);
  if (p.mode == static_cast<int>(importance_sampling::truncated)) {
    if (r > p.cap) {
      ++tally.importance_truncated;
      return p.cap;
    }
    return r;
  }
  if (p.band_low <= r && r <= p.band_high) return r;
  ++tally.importance_masked;
  return 0.0;
}

struct ppo_params {
  double clip_low = 0.2, clip_high = 0.2;
  double dual_clip = 0;  // 0: off
  double log_ratio_clamp = 20;
  importance_params importance{};
};

inline ppo_params to_params(const ppo_clip_options& o) {
  return {o.clip_low, o.clip_high, o.dual_clip ? *o.dual_clip : 0.0, o.log_ratio_clamp,
          to_params(o.importance)};
}

// detail::ppo_token of policy_loss.hpp.
CASCADE_RL_HD inline token_term ppo_token(double logp, double old_logp, double advantage,
                                          const ppo_params& p, loss_tally& tally) {
  double log_ratio = logp - old_logp;
  const bool clamped = log_ratio > p.log_ratio_clamp || log_ratio < -p.log_ratio_clamp;
  log_ratio = clamp(log_ratio, -p.log_ratio_clamp, p.log_ratio_clamp);
  tally.approx_kl_sum += -log_ratio;
  const double ratio = ::cuda::std::exp(log_ratio);
  const double l1 = -advantage * ratio;
  const double l2 = -advantage * clamp(ratio, 1.0 - p.clip_low, 1.0 + p.clip_high);
  token_term l{l1, clamped ? 0.0 : -advantage * ratio};
  if (l2 > l1) {
    l = {l2, 0.0};
    ++tally.clipped;
  }
  if (p.dual_clip > 0 && advantage < 0) {
    const double l3 = -advantage * p.dual_clip;
    if (l.value > l3) {
      l = {l3, 0.0};
      ++tally.dual_clipped;
    }
  }
  return l;
}

struct kl_params {
  int estimator = static_cast<int>(kl_estimator::k3);
  double input_clamp = 20, output_clamp = 10;
};

inline kl_params to_params(const kl_options& o) {
  return {static_cast<int>(o.estimator), o.input_clamp, o.output_clamp};
}

// detail::kl_token of kl_estimators.hpp.
CASCADE_RL_HD inline token_term kl_token(double logp, double ref, const kl_params& p) {
  const double d = logp - ref;
  switch (p.estimator) {
    case static_cast<int>(kl_estimator::k1): return {d, 1.0};
    case static_cast<int>(kl_estimator::abs):
      return {::cuda::std::fabs(d), d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0)};
    case static_cast<int>(kl_estimator::k2): return {0.5 * d * d, d};
    default: {
      double x = ref - logp;
      const bool in_clamped = x > p.input_clamp || x < -p.input_clamp;
      x = clamp(x, -p.input_clamp, p.input_clamp);
      const double e = ::cuda::std::exp(x);
      const double k = e - x - 1.0;
      if (k > p.output_clamp || k < -p.output_clamp)
        return {clamp(k, -p.output_clamp, p.output_clamp), 0.0};
      return {k, in_clamped ? 0.0 : 1.0 - e};
    }
  }
}

// The aggregation weight c_t of a valid token as the host core applies it: computed in
// double, stored in T (grad_out holds it in the host core), then read back as double.
// `sequence_valid` is the valid-token count of t's sequence (seq-mean-token-mean only).
template <class T>
CASCADE_RL_HD inline double aggregation_weight(int mode, const loss_normalizer& n,
                                               unsigned long long sequence_valid) {
  double c = 1.0;
  switch (mode) {
    case static_cast<int>(loss_aggregation::token_mean): c = 1.0 / n.tokens; break;
    case static_cast<int>(loss_aggregation::token_sum): c = 1.0; break;
    case static_cast<int>(loss_aggregation::seq_mean_token_sum): c = 1.0 / n.sequences; break;
    case static_cast<int>(loss_aggregation::seq_mean_token_mean):
      c = sequence_valid == 0 ? 0.0
                              : 1.0 / (static_cast<double>(sequence_valid) * n.sequences);
      break;
    case static_cast<int>(loss_aggregation::seq_mean_token_sum_norm):
      c = 1.0 / (n.sequences * n.scale);
      break;
    default: break;
  }
  return static_cast<double>(static_cast<T>(c));
}

// local_loss_counts of loss_aggregation.hpp: valid tokens, and sequences with at least
// one valid token (integers: any order of addition gives the same counts).
struct valid_counts {
  unsigned long long tokens = 0;
  unsigned long long sequences = 0;
};
struct add_valid_counts {
  CASCADE_RL_HD valid_counts operator()(const valid_counts& a, const valid_counts& b) const {
    return {a.tokens + b.tokens, a.sequences + b.sequences};
  }
};
CASCADE_RL_HD inline valid_counts counts_of_sequence(unsigned long long valid) {
  return {valid, valid > 0 ? 1ull : 0ull};
}
inline loss_counts to_loss_counts(const valid_counts& c) {
  loss_counts out;
  out.tokens = static_cast<std::size_t>(c.tokens);
  out.sequences = static_cast<std::size_t>(c.sequences);
  return out;
}

// The token terms of each loss. term(t, tally) is called for valid tokens only, after
// ++tally.valid_tokens; it returns the weighted token loss and d/dlogp before the
// aggregation weight. on_masked(t) lets a term clear its own extra outputs.
template <class T>
struct reinforce_term {
  const T* log_probs;
  const T* advantages;
  const T* behaviour;  // read only when importance.mode != none
  bool log_prob_surrogate;
  importance_params importance;

  CASCADE_RL_HD token_term operator()(std::size_t t, loss_tally& tally) const {
    const double logp = static_cast<double>(log_probs[t]);
    const double a = static_cast<double>(advantages[t]);
    const double value = log_prob_surrogate ? -a * logp : -a;
    const double w =
        importance.mode == 0
            ? 1.0
            : importance_weight(logp - static_cast<double>(behaviour[t]), importance, tally);
    return {value * w, -a * w};
  }
  CASCADE_RL_HD void on_masked(std::size_t) const {}
  // The first input (in the host core's validation order) that is not finite at t.
  CASCADE_RL_HD nonfinite_hit first_nonfinite(std::size_t t) const {
    nonfinite_hit hit;
    hit.check(0, log_probs[t]) || hit.check(1, advantages[t]) ||
        (importance.mode != 0 && hit.check(2, behaviour[t]));
    return hit;
  }
};

template <class T>
struct ppo_term {
  const T* log_probs;
  const T* old_log_probs;
  const T* advantages;
  const T* behaviour;
  ppo_params params;

  CASCADE_RL_HD token_term operator()(std::size_t t, loss_tally& tally) const {
    const double old_logp = static_cast<double>(old_log_probs[t]);
    const token_term l = ppo_token(static_cast<double>(log_probs[t]), old_logp,
                                   static_cast<double>(advantages[t]), params, tally);
    const double w = params.importance.mode == 0
                         ? 1.0
                         : importance_weight(old_logp - static_cast<double>(behaviour[t]),
                                             params.importance, tally);
    return {l.value * w, l.grad * w};
  }
  CASCADE_RL_HD void on_masked(std::size_t) const {}
  CASCADE_RL_HD nonfinite_hit first_nonfinite(std::size_t t) const {
    nonfinite_hit hit;
    hit.check(0, log_probs[t]) || hit.check(1, old_log_probs[t]) || hit.check(2, advantages[t]) ||
        (params.importance.mode != 0 && hit.check(3, behaviour[t]));
    return hit;
  }
};

template <class T>
struct kl_term {
  const T* log_probs;
  const T* ref_log_probs;
  kl_params params;
  double coefficient;
  T* values_out;  // kl_penalty: k_t per token (0 on masked); null for kl_loss

  CASCADE_RL_HD token_term operator()(std::size_t t, loss_tally&) const {
    const token_term k = kl_token(static_cast<double>(log_probs[t]),
                                  static_cast<double>(ref_log_probs[t]), params);
    if (values_out != nullptr) values_out[t] = static_cast<T>(k.value);
    return {coefficient * k.value, coefficient * k.grad};
  }
  CASCADE_RL_HD void on_masked(std::size_t t) const {
    if (values_out != nullptr) values_out[t] = T(0);
  }
  CASCADE_RL_HD nonfinite_hit first_nonfinite(std::size_t t) const {
    nonfinite_hit hit;
    hit.check(0, log_probs[t]) || hit.check(1, ref_log_probs[t]);
    return hit;
  }
};

template <class T>
struct aggregate_term {
  const T* token_losses;
  const T* token_grads;

  CASCADE_RL_HD token_term operator()(std::size_t t, loss_tally&) const {
    return {static_cast<double>(token_losses[t]), static_cast<double>(token_grads[t])};
  }
  CASCADE_RL_HD void on_masked(std::size_t) const {}
  CASCADE_RL_HD nonfinite_hit first_nonfinite(std::size_t t) const {
    nonfinite_hit hit;
    hit.check(0, token_losses[t]) || hit.check(1, token_grads[t]);
    return hit;
  }
};

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
