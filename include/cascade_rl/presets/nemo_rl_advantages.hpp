#pragma once
// NeMo-RL's advantage estimators (nemo_rl/algorithms/advantage_estimator.py and
// calculate_baseline_and_std_per_prompt in nemo_rl/algorithms/utils.py, at commit
// 7ea279ab) through cascade_rl's estimators; checked against tests/reference/
// trl_nemo_rl.json (nemo_rl.advantage_estimators).
//
//   GRPOAdvantageEstimator: per prompt group, baseline = the group mean (or, with
//     use_leave_one_out_baseline, the mean of the other members), std = the unbiased std
//     of the same members (0 for a single other member); normalize_rewards divides by
//     std + 1e-6 where std > 0. A group of one gets advantage 0. Without leave-one-out
//     that is grpo_advantages (grpo_options below); with it, leave_one_out_statistics.
//     The groups are contiguous: order the batch by prompt (NeMo groups by unique
//     prompt wherever the rows are).
//   RawRewardAdvantageEstimator: the reward on every token, normalize_advantages whitens
//     over the valid tokens with the biased variance: masked_whiten with
//     raw_reward_whitening(). NeMo clamps the variance at 1e-8 where we add 1e-8 inside
//     the sqrt (a relative 5e-9 at unit variance), and NeMo also writes the whitened value
//     on masked tokens, where masked_whiten writes 0.
//   ReinforcePlusPlusAdvantageEstimator: per row r - group mean (minus_baseline; a group of
//     one 0) or r, on every token, minus reference_policy_kl_penalty * k(logp, ref) per
//     token when use_kl_in_reward (calculate_kl's default clamps +-20 / +-10: kl_options
//     of k3; k1 and k2 are refused, NeMo clamps them and ours do not), then whitened over
//     the valid tokens as RawReward's: reinforce_plus_plus_advantages below.
//   GDPOAdvantageEstimator: each component through the GRPO estimator above (same
//     leave-one-out and normalize_rewards), the weighted sum per sequence, then
//     standardised over the sequences (not the tokens, unlike veRL's GDPO) with the
//     unbiased std and no epsilon (0 for a zero spread): gdpo_advantages below.
//   OPDAdvantageEstimator: teacher_logprobs - prev_logprobs on the valid tokens, 0 on the
//     others: distillation_advantages with student_log_probs = prev_logprobs (its
//     last_metrics are statistics of that, not computed here).

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"

namespace cascade_rl::presets::nemo_rl {

// AdvEstimatorConfig's GRPO fields, by NeMo's names, with NeMo's defaults.
struct grpo_estimator_config {
  bool use_leave_one_out_baseline = true;
  bool normalize_rewards = true;
};

// The estimator without leave-one-out: (r - mean) / (std + 1e-6), unbiased std, a group
// of one 0 (normalize_rewards = false: r - mean).
[[nodiscard]] inline grpo_options grpo(bool normalize_rewards = true) {
  return {.scale_by_std = normalize_rewards,
          .epsilon = 1e-6,
          .epsilon_at = epsilon_placement::added_to_std,
          .estimator = std_estimator::unbiased,
          .singleton = singleton_rule::zero_advantage,
          .nonfinite = nonfinite_rule::error,
          .accumulation = mean_accumulation::double_precision};
}

// RawRewardAdvantageEstimator's normalize_advantages: the biased variance, 1e-8.
[[nodiscard]] inline whitening_options raw_reward_whitening() {
  return {.epsilon = 1e-8,
          .estimator = std_estimator::biased,
          .shift_mean = true,
          .accumulation = mean_accumulation::double_precision};
}

// GRPOAdvantageEstimator's per-sequence advantages (NeMo expands each to its row's tokens).
template <std::floating_point T, exec::host_policy Policy>
void grpo_advantages(const Policy& policy, const group_layout& groups, std::span<const T> rewards,
                     std::span<T> advantages_out, const grpo_estimator_config& config = {}) {
  groups.require_sequences(rewards.size(), "rewards");
  cascade_rl::detail::require_size(advantages_out.size(), rewards.size(), "advantages_out",
                                   "one per sequence");
  if (!config.use_leave_one_out_baseline) {
    cascade_rl::grpo_advantages(policy, groups, rewards, advantages_out,
                                grpo(config.normalize_rewards));
    return;
  }
  // Leave-one-out over the groups of two or more (leave_one_out_statistics refuses a group
  // of one; NeMo gives it 0).
  std::vector<T> kept;
  std::vector<std::int64_t> offsets{0};
  for (std::size_t g = 0; g < groups.groups(); ++g) {
    if (groups.end(g) - groups.begin(g) < 2) continue;
    for (std::size_t i = groups.begin(g); i < groups.end(g); ++i) kept.push_back(rewards[i]);
    offsets.push_back(static_cast<std::int64_t>(kept.size()));
  }
  std::vector<T> mean(kept.size()), std(kept.size());
  if (!kept.empty()) {
    const std::span<const std::int64_t> offset_view(offsets);
    const group_layout multi(offset_view);
    leave_one_out_statistics(policy, multi, std::span<const T>(kept), std::span<T>(mean),
                             std::span<T>(std), {.estimator = std_estimator::unbiased});
  }
  std::size_t k = 0;
  for (std::size_t g = 0; g < groups.groups(); ++g) {
    if (groups.end(g) - groups.begin(g) < 2) {
      for (std::size_t i = groups.begin(g); i < groups.end(g); ++i) advantages_out[i] = T(0);
      continue;
    }
    for (std::size_t i = groups.begin(g); i < groups.end(g); ++i, ++k) {
      double a = static_cast<double>(rewards[i]) - static_cast<double>(mean[k]);
      const double s = static_cast<double>(std[k]);
      if (config.normalize_rewards && s > 0) a /= s + 1e-6;
      advantages_out[i] = static_cast<T>(a);
    }
  }
}

// ReinforcePlusPlusAdvantageEstimator's fields (its own and the loss config's it reads).
struct reinforce_plus_plus_config {
  bool minus_baseline = true;
  bool use_kl_in_reward = false;
  double reference_policy_kl_penalty = 0.01;
  std::string_view reference_policy_kl_type = "k3";
};

// ReinforcePlusPlusAdvantageEstimator's per-token advantages over `tokens` (one row per
// sequence of `groups`); masked tokens get 0 (NeMo writes the whitened value there too).
// log_probs / ref_log_probs are read only with use_kl_in_reward.
template <std::floating_point T, exec::host_policy Policy>
void reinforce_plus_plus_advantages(const Policy& policy, const group_layout& groups,
                                    const token_layout& tokens, std::span<const T> rewards,
                                    std::span<const T> log_probs, std::span<const T> ref_log_probs,
                                    std::span<T> advantages_out,
                                    const reinforce_plus_plus_config& config = {}) {
  groups.require_sequences(rewards.size(), "rewards");
  groups.require_sequences(tokens.sequences(), "tokens");
  cascade_rl::detail::require_size(advantages_out.size(), tokens.tokens(), "advantages_out",
                                   "one per token");
  std::vector<T> per_row(rewards.begin(), rewards.end());
  if (config.minus_baseline)
    cascade_rl::grpo_advantages(policy, groups, rewards, std::span<T>(per_row), grpo(false));
  std::vector<T> per_token(tokens.tokens(), T(0));
  for (std::size_t s = 0; s < tokens.sequences(); ++s)
    for (std::size_t t = tokens.begin(s); t < tokens.end(s); ++t) per_token[t] = per_row[s];
  if (config.use_kl_in_reward) {
    if (config.reference_policy_kl_type != "k3")
      cascade_rl::detail::fail("reference_policy_kl_type",
                               "is \"" + std::string(config.reference_policy_kl_type) +
                                   "\": NeMo clamps k1 and k2 too, cascade_rl's do not; only "
                                   "k3 is supported in the reward");
    std::vector<T> kl(tokens.tokens()), unused(tokens.tokens());
    (void)kl_penalty(
        policy, tokens, kl_inputs<T>{.log_probs = log_probs, .ref_log_probs = ref_log_probs},
        std::span<T>(kl), std::span<T>(unused),
        kl_options{.estimator = kl_estimator::k3, .input_clamp = 20.0, .output_clamp = 10.0});
    for (std::size_t t = 0; t < per_token.size(); ++t)
      per_token[t] =
          static_cast<T>(static_cast<double>(per_token[t]) -
                         config.reference_policy_kl_penalty * static_cast<double>(kl[t]));
  }
  masked_whiten(policy, tokens, std::span<const T>(per_token), advantages_out,
                raw_reward_whitening());
}

// GDPOAdvantageEstimator's per-sequence advantages from component_scores, component-major
// ([K][N]: component k's scores at [k N, (k + 1) N), NeMo's reward/<name> keys in sorted
// order), with one weight per component (empty: all 1).
template <std::floating_point T, exec::host_policy Policy>
void gdpo_advantages(const Policy& policy, const group_layout& groups,
                     std::span<const T> component_scores, std::span<const double> weights,
                     std::span<T> advantages_out, const grpo_estimator_config& config = {}) {
  const std::size_t n = advantages_out.size();
  groups.require_sequences(n, "advantages_out");
  if (n == 0 || component_scores.size() % n != 0)
    cascade_rl::detail::fail("component_scores", "is not [components][sequences]");
  const std::size_t components = component_scores.size() / n;
  if (components < 2)
    cascade_rl::detail::fail("component_scores", "holds " + std::to_string(components) +
                                                     " component(s); GDPO needs two or more");
  if (!weights.empty())
    cascade_rl::detail::require_size(weights.size(), components, "weights", "one per component");
  std::vector<double> sum(n, 0.0);
  std::vector<T> part(n);
  for (std::size_t k = 0; k < components; ++k) {
    grpo_advantages(policy, groups, component_scores.subspan(k * n, n), std::span<T>(part), config);
    const double w = weights.empty() ? 1.0 : weights[k];
    for (std::size_t i = 0; i < n; ++i) sum[i] += w * static_cast<double>(part[i]);
  }
  std::vector<T> summed(n);
  for (std::size_t i = 0; i < n; ++i) summed[i] = static_cast<T>(sum[i]);
  const std::int64_t whole[] = {0, static_cast<std::int64_t>(n)};
  const std::span<const std::int64_t> whole_view(whole);
  grpo_options standardise = grpo(true);
  standardise.epsilon = 0.0;
  cascade_rl::grpo_advantages(policy, group_layout(whole_view), std::span<const T>(summed),
                              advantages_out, standardise);
}

}  // namespace cascade_rl::presets::nemo_rl
