#pragma once
// Options that reproduce veRL's advantage estimators (verl/trainer/ppo/core_algos.py
// at 1dda039b; checked against tests/reference/verl_core_algos.json and
// verl_core_algos_v2.json, float32, rtol 1e-5, atol 1e-6, by
// tests/algorithms/test_verl_reference_advantages.cpp).
//
// veRL computes in float32 tensors: torch.mean of a small group is a float32 sum, so
// the group-based presets use mean_accumulation::float32_sequential, and whitening (a
// sum over the whole batch) uses float32_rounded_sum. That matters only
// where veRL amplifies a rounding residue (a group that differs by one ulp); anywhere
// else the double default agrees within float32 tolerance.

#include "cascade_rl/algorithms/gae_advantages.hpp"
#include "cascade_rl/algorithms/gdpo_advantages.hpp"
#include "cascade_rl/algorithms/gpg_advantages.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/grpo_passk_advantages.hpp"
#include "cascade_rl/algorithms/opo_advantages.hpp"
#include "cascade_rl/algorithms/optimal_token_baseline.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/algorithms/remax_advantages.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"

namespace cascade_rl::presets::verl {

// compute_grpo_outcome_advantage(epsilon = 1e-6, norm_adv_by_std_in_grpo): torch.std
// (unbiased), eps added to the std, a group of one gets mean 0 and std 1.
[[nodiscard]] inline grpo_options grpo(bool norm_adv_by_std_in_grpo = true,
                                       double epsilon = 1e-6) {
  return {.scale_by_std = norm_adv_by_std_in_grpo,
          .epsilon = epsilon,
          .epsilon_at = epsilon_placement::added_to_std,
          .estimator = std_estimator::unbiased,
          .singleton = singleton_rule::raw_score,
          .nonfinite = nonfinite_rule::error,
          .accumulation = mean_accumulation::float32_sequential};
}

// Dr. GRPO as veRL runs it: GRPO with norm_adv_by_std_in_grpo = False.
[[nodiscard]] inline grpo_options dr_grpo() { return grpo(false); }

// compute_rloo_outcome_advantage: a group of one keeps its score.
[[nodiscard]] inline rloo_options rloo() {
  return {.singleton = singleton_rule::raw_score,
          .nonfinite = nonfinite_rule::error,
          .accumulation = mean_accumulation::float32_sequential};
}

// masked_whiten: (x - mean) * rsqrt(var_unbiased + 1e-8), shift_mean = True, with the
// mean of a float32 batch sum (torch.sum(values * mask) / mask.sum()).
[[nodiscard]] inline whitening_options whitening() {
  return {.epsilon = 1e-8,
          .estimator = std_estimator::unbiased,
          .shift_mean = true,
          .accumulation = mean_accumulation::float32_rounded_sum};
}

// compute_reinforce_plus_plus_outcome_advantage (config.gamma).
[[nodiscard]] inline reinforce_plus_plus_options reinforce_plus_plus(double gamma = 1.0) {
  return {.gamma = gamma, .whitening = whitening()};
}

// compute_reinforce_plus_plus_baseline_outcome_advantage: a group of one gets mean 0.
[[nodiscard]] inline reinforce_plus_plus_baseline_options reinforce_plus_plus_baseline() {
  return {.singleton = singleton_rule::raw_score,
          .nonfinite = nonfinite_rule::error,
          .accumulation = mean_accumulation::float32_sequential,
          .whitening = whitening()};
}

// compute_gae_advantage_return (algorithm.gamma, algorithm.lam): GAE over the valid
// tokens, then masked_whiten. veRL leaves the whitened carried value on masked tokens
// where gae_advantages writes 0 (see gae_advantages.hpp); valid tokens agree.
[[nodiscard]] inline gae_options gae(double gamma = 1.0, double lam = 1.0) {
  return {.gamma = gamma, .lambda = lam, .whitening = whitening()};
}

// compute_remax_outcome_advantage: nothing to choose. veRL's advantage on a masked token
// inside a sequence is the return there; remax_advantages writes 0 (valid tokens and the
// returns agree).
[[nodiscard]] inline remax_options remax() { return {}; }

// compute_opo_outcome_advantage: a group of one gets baseline 0 (its raw score).
[[nodiscard]] inline opo_options opo() {
  return {.singleton = singleton_rule::raw_score, .nonfinite = nonfinite_rule::error};
}

// compute_gpg_outcome_advantage(f_norm): torch.mean of a small group (float32), a group
// of one gets mean 0. veRL's alpha keyword is overwritten by N / max(non-zero, 1).
[[nodiscard]] inline gpg_options gpg(double f_norm = 1.0) {
  return {.f_norm = f_norm,
          .singleton = singleton_rule::raw_score,
          .nonfinite = nonfinite_rule::error,
          .accumulation = mean_accumulation::float32_sequential};
}

// compute_grpo_passk_outcome_advantage: norm_adv_by_std_in_grpo as the algorithm config
// says (veRL reads the config, not its keyword argument), torch.std (unbiased) of a
// float32 group, eps added to the std, groups of one refused.
[[nodiscard]] inline grpo_passk_options grpo_passk(bool norm_adv_by_std_in_grpo = true,
                                                   double epsilon = 1e-6) {
  return {.scale_by_std = norm_adv_by_std_in_grpo,
          .epsilon = epsilon,
          .epsilon_at = epsilon_placement::added_to_std,
          .estimator = std_estimator::unbiased,
          .singleton = singleton_rule::error,
          .nonfinite = nonfinite_rule::error,
          .accumulation = mean_accumulation::float32_sequential};
}

// compute_grpo_vectorized_outcome_advantage (verl/utils/groupwise.py group_mean_std): the
// same conventions as grpo() (a group of one gets mean 0 and std 1, eps added to the
// unbiased std); only its float32 reductions differ. Under veRL's trainer the estimator
// gets the config alone, never its norm_adv_by_std_in_grpo keyword, so it always divides
// by the std; adv_estimator("grpo_vectorized") does the same.
[[nodiscard]] inline grpo_options grpo_vectorized(bool norm_adv_by_std_in_grpo = true,
                                                  double epsilon = 1e-6) {
  return grpo(norm_adv_by_std_in_grpo, epsilon);
}

// compute_rloo_vectorized_outcome_advantage: (c s - sum_g) / max(c - 1, 1) * (c > 1), so
// a group of one gets 0, where the loop-based rloo() keeps its score.
[[nodiscard]] inline rloo_options rloo_vectorized() {
  rloo_options o = rloo();
  o.singleton = singleton_rule::zero_advantage;
  return o;
}

// compute_gdpo_outcome_advantage: each component through compute_grpo_outcome_advantage
// (grpo(norm_adv_by_std_in_grpo, epsilon)), then masked_whiten. The weights
// (gdpo_reward_weights, default 1 each) go with the inputs.
[[nodiscard]] inline gdpo_options gdpo(bool norm_adv_by_std_in_grpo = true, double epsilon = 1e-6) {
  return {.grpo = grpo(norm_adv_by_std_in_grpo, epsilon), .whitening = whitening()};
}

// compute_optimal_token_baseline_advantage(handle_zero_tail = True, epsilon = 1e-8): veRL's
// trainer passes neither, so its defaults hold (handle_zero_tail's is True since veRL
// 8acd940f1, February 2026; it was False before). Positions are columns (offsets).
[[nodiscard]] inline optimal_token_baseline_options optimal_token_baseline(
    bool handle_zero_tail = true, double epsilon = 1e-8) {
  return {.epsilon = epsilon, .handle_zero_tail = handle_zero_tail, .multi_turn = false};
}

// compute_multi_turn_optimal_token_baseline_advantage(handle_zero_tail = True, epsilon =
// 1e-8): positions are ranks among a row's valid tokens, empty rows leave their group.
[[nodiscard]] inline optimal_token_baseline_options tir_optimal_token_baseline(
    bool handle_zero_tail = true, double epsilon = 1e-8) {
  return {.epsilon = epsilon, .handle_zero_tail = handle_zero_tail, .multi_turn = true};
}

}  // namespace cascade_rl::presets::verl
