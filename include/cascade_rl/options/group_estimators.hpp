#pragma once
// The options of the group estimators (algorithms/group_statistics.hpp,
// grpo_advantages.hpp, rloo_advantages.hpp, reinforce_plus_plus.hpp, gae_advantages.hpp,
// remax_advantages.hpp, opo_advantages.hpp, gpg_advantages.hpp, grpo_passk_advantages.hpp,
// gdpo_advantages.hpp, optimal_token_baseline.hpp), of the zero-variance filter
// (group_filters.hpp) and the statistic a group reduces to: plain values that the terms,
// every executor's driver and the kernels take as they are
// (terms/group_advantage.hpp turns them into per-group decisions).

#include <cstddef>

#include "cascade_rl/options/advantage_conventions.hpp"

namespace cascade_rl {

// A masked token inside a sequence (a tool observation in a multi-turn rollout):
// REINFORCE++'s return carries across it or is cut there (terms/discounted_return.hpp).
enum class masked_token_return { carry, cut };

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
  // The unique longest row's baseline 0 past the others' lengths. veRL's functions default
  // to true (both variants, since 8acd940f1): presets::verl sets it; false here keeps the
  // plain estimator.
  bool handle_zero_tail = false;
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

}  // namespace cascade_rl
