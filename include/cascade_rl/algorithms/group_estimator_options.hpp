#pragma once
// The options of the group estimators (group_statistics.hpp, grpo_advantages.hpp,
// rloo_advantages.hpp, reinforce_plus_plus.hpp, gae_advantages.hpp, remax_advantages.hpp,
// opo_advantages.hpp, gpg_advantages.hpp, grpo_passk_advantages.hpp) and of the
// zero-variance filter (group_filters.hpp), the statistic a group reduces to, and the
// plain terms::group_params each estimator's options become: one place that turns options
// into per-group decisions (terms/group_advantage.hpp) for the host, the portable path
// and the kernels. Apart from the algorithms, so that the CUDA kernels and their launch
// layer take them without the host implementations.

#include <cstddef>

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/terms/advantage_options.hpp"
#include "cascade_rl/terms/discounted_return.hpp"
#include "cascade_rl/terms/group_advantage.hpp"
#include "cascade_rl/terms/passk_advantage.hpp"

namespace cascade_rl {

// What group_statistics writes per group.
struct group_statistic {
  double mean = 0.0;
  double std = 0.0;  // 0 for a group of one (no spread), whatever the estimator
  double min = 0.0;
  double max = 0.0;
  std::size_t count = 0;
  bool zero_variance = false;  // max == min, exactly; a group of one is zero variance
};

struct group_statistics_options {
  std_estimator estimator = std_estimator::unbiased;
  mean_accumulation accumulation = mean_accumulation::double_precision;
};

struct leave_one_out_options {
  std_estimator estimator = std_estimator::unbiased;
};

struct grpo_options {
  bool scale_by_std = true;  // false: Dr. GRPO
  double epsilon = 1e-6;
  epsilon_placement epsilon_at = epsilon_placement::added_to_std;
  std_estimator estimator = std_estimator::unbiased;
  // Applies to groups of one when the estimator needs two (scale_by_std with the
  // unbiased std). Otherwise a group of one is a zero-variance group and gets 0,
  // except under raw_score, which always reproduces veRL's mean 0 / std 1.
  singleton_rule singleton = singleton_rule::error;
  nonfinite_rule nonfinite = nonfinite_rule::error;
  mean_accumulation accumulation = mean_accumulation::double_precision;
};

struct rloo_options {
  singleton_rule singleton = singleton_rule::error;  // a group of one has no "others"
  nonfinite_rule nonfinite = nonfinite_rule::error;
  mean_accumulation accumulation = mean_accumulation::double_precision;
};

// veRL masked_whiten: (x - mean) * rsqrt(var + eps) over the valid tokens, with the
// unbiased variance (masked_var's Bessel correction N / (N - 1)). veRL also adds 1e-8
// to the token count inside masked_mean; at any real count that changes nothing in
// float32, so we divide by the count itself.
struct whitening_options {
  double epsilon = 1e-8;  // inside the sqrt
  std_estimator estimator = std_estimator::unbiased;
  bool shift_mean = true;  // false: add the mean back after scaling (veRL shift_mean)
  // How the batch mean is taken. The sum always runs in double over fixed blocks;
  // float32_rounded_sum then rounds it (and the deviations) as a float32 peer does.
  // float32_sequential is refused: a sequential float32 sum over a whole batch
  // reproduces no peer and loses precision as the batch grows.
  mean_accumulation accumulation = mean_accumulation::double_precision;
};

struct reinforce_plus_plus_options {
  double gamma = 1.0;  // discount of the return, in [0, 1]
  // A masked token inside a sequence: carry the return across it (veRL 1dda039) or cut
  // it there (terms/discounted_return.hpp).
  masked_token_return masked = masked_token_return::carry;
  whitening_options whitening{};
};

// The optimal token baseline (optimal_token_baseline.hpp).
struct optimal_token_baseline_options {
  double epsilon = 1e-8;          // added to the group's sum of W (finite, >= 0)
  bool handle_zero_tail = false;  // veRL's default: false single-turn, true multi-turn
  bool multi_turn = false;        // positions by valid-token rank (veRL's tir_ variant)
};

// Generalized advantage estimation (gae_advantages.hpp): the TD(lambda) advantage from
// a value estimate per token, whitened over the batch like REINFORCE++.
struct gae_options {
  double gamma = 1.0;   // discount, in [0, 1]
  double lambda = 1.0;  // GAE's lambda, in [0, 1]: 0 is the one-step TD error, 1 the
                        // discounted return minus the value
  whitening_options whitening{};
};

// ReMax (remax_advantages.hpp): no convention to choose; the struct names the estimator
// where options are passed around (presets::verl::advantage_estimator_options).
struct remax_options {};

// OPO (opo_advantages.hpp): the length-weighted group baseline.
struct opo_options {
  // veRL gives a group of one a baseline of 0, i.e. keeps its raw score (raw_score).
  singleton_rule singleton = singleton_rule::error;
  nonfinite_rule nonfinite = nonfinite_rule::error;
};

// GPG (gpg_advantages.hpp): alpha (s - mean_g) / f_norm, alpha = N / max(non-zero, 1)
// over the batch.
struct gpg_options {
  double f_norm = 1.0;  // > 0
  // veRL gives a group of one a mean of 0, i.e. alpha * s / f_norm (raw_score).
  singleton_rule singleton = singleton_rule::error;
  nonfinite_rule nonfinite = nonfinite_rule::error;
  mean_accumulation accumulation = mean_accumulation::double_precision;
};

// GRPO pass@k (grpo_passk_advantages.hpp): the best response of a group gets
// (r_max - r_second) / (std + eps), the others 0.
struct grpo_passk_options {
  bool scale_by_std = true;  // veRL's norm_adv_by_std_in_grpo
  double epsilon = 1e-6;
  epsilon_placement epsilon_at = epsilon_placement::added_to_std;
  std_estimator estimator = std_estimator::unbiased;
  // error (veRL refuses groups of one) or zero_advantage; raw_score is refused.
  singleton_rule singleton = singleton_rule::error;
  nonfinite_rule nonfinite = nonfinite_rule::error;
  mean_accumulation accumulation = mean_accumulation::double_precision;
};

// GDPO (gdpo_advantages.hpp): GRPO per reward component, weighted sum, batch whitening.
struct gdpo_options {
  grpo_options grpo{};  // how each component is normalised within its groups
  whitening_options whitening{};
};

struct reinforce_plus_plus_baseline_options {
  // veRL gives a group of one a mean of 0, i.e. keeps its raw score (raw_score).
  singleton_rule singleton = singleton_rule::error;
  nonfinite_rule nonfinite = nonfinite_rule::error;
  mean_accumulation accumulation = mean_accumulation::double_precision;
  whitening_options whitening{};
};

struct zero_variance_filter_options {
  // error: refuse NaN or infinite rewards; zero_group: drop the groups holding them
  // (their advantages would be zeroed anyway).
  nonfinite_rule nonfinite = nonfinite_rule::error;
};

namespace detail {

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

inline terms::passk_params passk_params_of(const grpo_passk_options& o) {
  terms::passk_params p;
  p.scale_by_std = o.scale_by_std;
  p.estimator = o.estimator;
  p.epsilon = o.epsilon;
  p.epsilon_at = o.epsilon_at;
  p.accumulation = o.accumulation;
  return p;
}

inline terms::group_params group_params_of(const rloo_options& o) {
  return mean_baseline_params(terms::group_kind::rloo, o.singleton, o.nonfinite, o.accumulation);
}

inline terms::group_params group_params_of(const reinforce_plus_plus_baseline_options& o) {
  return mean_baseline_params(terms::group_kind::baseline, o.singleton, o.nonfinite, o.accumulation);
}

}  // namespace detail
}  // namespace cascade_rl
