#pragma once
// veRL's loss conventions (verl/trainer/ppo/core_algos.py at commit 1dda039b) as option
// values, checked against tests/reference/verl_core_algos.json:
//   - PPO clip: clip_ratio 0.2 (clip_ratio_low/high override it), dual clip
//     clip_ratio_c = 3.0 (always on in compute_policy_loss_vanilla), log-ratio clamped
//     to +-20 before exp, loss_agg_mode "token-mean" by default;
//   - CISPO: clip_ratio_low/high as PPO's, no dual clip, the clamp of +-20;
//   - DPPO-TV/KL: clip_ratio_low/high as divergence thresholds, clip_ratio_c truncation;
//   - DRO: policy_loss.dro_beta required, no clamp;
//   - SAPO: tau_pos/tau_neg, always seq-mean-token-mean (loss_agg_mode ignored);
//   - GPG and compute_policy_loss_reinforce: -A * logp, REINFORCE's log-prob surrogate;
//   - truncated IS: w = min(exp(old_log_prob - rollout_log_probs), tis_imp_ratio_cap);
//   - kl_penalty names "kl"/"k1", "abs", "mse"/"k2", "low_var_kl"/"k3", the latter with
//     the input clamped to +-20 and the output to +-10, each with a "+" suffix for the
//     straight-through gradient logp - ref; "full" (NotImplementedError in veRL) refused;
//   - agg_loss: a rank divides by its own valid-token count, by the number of its
//     sequences that hold a valid token, and (seq-mean-token-sum-norm) additionally by
//     the padded length T. single_rank_normalizer reproduces that; in a multi-rank or
//     micro-batched step pass global counts instead (see loss_aggregation.hpp).

#include <cstddef>
#include <string>
#include <string_view>

#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/token_layout.hpp"

namespace cascade_rl::presets::verl {

// actor.loss_agg_mode: veRL's names are loss_aggregation's to_string.
[[nodiscard]] inline loss_aggregation loss_agg_mode(std::string_view name) {
  constexpr loss_aggregation modes[] = {
      loss_aggregation::token_mean, loss_aggregation::token_sum,
      loss_aggregation::seq_mean_token_sum, loss_aggregation::seq_mean_token_mean,
      loss_aggregation::seq_mean_token_sum_norm};
  for (const auto mode : modes)
    if (to_string(mode) == name) return mode;
  // (Built with append: GCC 12 flags "literal" + std::string with a bogus -Wrestrict.)
  std::string problem = "is \"";
  problem.append(name).append("\", not a veRL mode (");
  for (const auto mode : modes)
    problem.append(mode == modes[0] ? "" : ", ").append(to_string(mode));
  problem.append(")");
  detail::fail("loss_agg_mode", problem);
}

// compute_policy_loss_vanilla with actor config clip_ratio_low / clip_ratio_high /
// clip_ratio_c.
[[nodiscard]] inline ppo_clip_options ppo_clip(
    loss_aggregation mode = loss_aggregation::token_mean, double clip_ratio_low = 0.2,
    double clip_ratio_high = 0.2, double clip_ratio_c = 3.0) {
  return {.clip_low = clip_ratio_low,
          .clip_high = clip_ratio_high,
          .dual_clip = clip_ratio_c,
          .log_ratio_clamp = 20.0,
          .aggregation = mode,
          .importance = {}};
}

// The same with truncated importance sampling against the rollout log-probs
// (tis_imp_ratio_cap > 0).
[[nodiscard]] inline ppo_clip_options ppo_clip_with_tis(
    double tis_imp_ratio_cap, loss_aggregation mode = loss_aggregation::token_mean,
    double clip_ratio_low = 0.2, double clip_ratio_high = 0.2, double clip_ratio_c = 3.0) {
  ppo_clip_options options = ppo_clip(mode, clip_ratio_low, clip_ratio_high, clip_ratio_c);
  options.importance = {.mode = importance_sampling::truncated, .cap = tis_imp_ratio_cap};
  return options;
}

// compute_policy_loss_cispo: clip_ratio_low / clip_ratio_high (no dual clip), log-ratio
// clamped to +-20 before exp, the actor's loss_agg_mode. veRL's rollout_is_weights are
// the inputs' rollout_is_weights.
[[nodiscard]] inline cispo_options cispo(loss_aggregation mode = loss_aggregation::token_mean,
                                         double clip_ratio_low = 0.2,
                                         double clip_ratio_high = 0.2) {
  return {.clip_low = clip_ratio_low,
          .clip_high = clip_ratio_high,
          .log_ratio_clamp = 20.0,
          .aggregation = mode};
}

// compute_policy_loss_gpg: -A * logp (REINFORCE's log-prob surrogate, no ratio, no clip),
// the actor's loss_agg_mode; rollout_is_weights are the inputs'.
[[nodiscard]] inline reinforce_options gpg_loss(loss_aggregation mode = loss_aggregation::token_mean) {
  return {.aggregation = mode, .surrogate = reinforce_surrogate::log_prob, .importance = {}};
}

// compute_policy_loss_reinforce (not registered in veRL; its rollout-correction path calls
// it): the same loss as GPG with veRL's default aggregation seq-mean-token-sum and the
// precomputed IS weights as the inputs' rollout_is_weights. veRL's actor/ppo_kl metric
// (masked mean of rollout_log_prob - log_prob) is a statistic of the inputs, not computed.
[[nodiscard]] inline reinforce_options reinforce(
    loss_aggregation mode = loss_aggregation::seq_mean_token_sum) {
  return gpg_loss(mode);
}

// compute_policy_loss_dppo_tv / _dppo_kl: the divergence thresholds come from
// clip_ratio_low / clip_ratio_high, the truncation from the actor's clip_ratio_c (3 by
// default, where the DPPO paper recommends a large one), log-ratio clamp +-20.
[[nodiscard]] inline dppo_options dppo(terms::dppo_divergence divergence,
                                       loss_aggregation mode = loss_aggregation::token_mean,
                                       double clip_ratio_low = 0.2, double clip_ratio_high = 0.2,
                                       double clip_ratio_c = 3.0) {
  return {.divergence = divergence,
          .clip_low = clip_ratio_low,
          .clip_high = clip_ratio_high,
          .truncation = clip_ratio_c,
          .log_ratio_clamp = 20.0,
          .aggregation = mode};
}

// compute_policy_loss_sapo: tau_pos / tau_neg (veRL's defaults 1.0 and 1.05), log-ratio
// clamp +-20, and seq-mean-token-mean whatever the actor's loss_agg_mode (veRL ignores it
// for SAPO; cascade_rl's sapo_options honours its aggregation, this preset fixes it).
[[nodiscard]] inline sapo_options sapo(double tau_pos = 1.0, double tau_neg = 1.05) {
  return {.tau_pos = tau_pos,
          .tau_neg = tau_neg,
          .log_ratio_clamp = 20.0,
          .aggregation = loss_aggregation::seq_mean_token_mean};
}

// compute_policy_loss_dro: policy_loss.dro_beta (no default) and the actor's
// loss_agg_mode; no clamp.
[[nodiscard]] inline dro_options dro(double dro_beta,
                                     loss_aggregation mode = loss_aggregation::token_mean) {
  return {.beta = dro_beta, .aggregation = mode};
}

// kl_penalty's type strings and the estimator each names (one table: the parser and its
// error message read it).
struct kl_penalty_name {
  std::string_view name;
  kl_estimator estimator;
};
inline constexpr kl_penalty_name kl_penalty_names[] = {
    {"kl", kl_estimator::k1},  {"k1", kl_estimator::k1}, {"abs", kl_estimator::abs},
    {"mse", kl_estimator::k2}, {"k2", kl_estimator::k2}, {"low_var_kl", kl_estimator::k3},
    {"k3", kl_estimator::k3}};

// A type of the table, or one with a "+" suffix: the same estimate with the
// straight-through gradient logp - ref (kl_options::straight_through). k3's clamps are
// veRL's, +-20 on the input and +-10 on the value.
[[nodiscard]] inline kl_options kl_penalty(std::string_view type) {
  kl_options options{.estimator = kl_estimator::k3, .input_clamp = 20.0, .output_clamp = 10.0};
  std::string_view base = type;
  if (base.ends_with('+')) {
    base.remove_suffix(1);
    options.straight_through = true;
  }
  for (const kl_penalty_name& entry : kl_penalty_names)
    if (entry.name == base) {
      options.estimator = entry.estimator;
      return options;
    }
  std::string problem = "is \"";
  problem.append(type).append("\", not a veRL type this library computes (");
  for (const kl_penalty_name& entry : kl_penalty_names) problem.append(entry.name).append(", ");
  problem.resize(problem.size() - 2);
  problem.append("; each also with a '+' suffix");
  if (base == "full")
    problem.append("; \"full\" needs the whole distribution, and veRL refuses it too");
  problem.append(")");
  detail::fail("kl_penalty", problem);
}

// actor use_kl_loss: kl_loss_type (default low_var_kl), kl_loss_coef (default 0.001),
// aggregated with the actor's loss_agg_mode.
[[nodiscard]] inline kl_loss_options kl_loss(std::string_view kl_loss_type = "low_var_kl",
                                             double kl_loss_coef = 0.001,
                                             loss_aggregation mode = loss_aggregation::token_mean) {
  return {.kl = kl_penalty(kl_loss_type), .coefficient = kl_loss_coef, .aggregation = mode};
}

// The normaliser veRL's agg_loss uses for `mode` on one rank without micro-batching: the
// batch's own valid tokens and non-empty sequences, and the padded length T as scale.
template <exec::host_policy Policy>
[[nodiscard]] loss_normalizer single_rank_normalizer(const Policy& policy,
                                                     const token_layout& layout,
                                                     loss_aggregation mode,
                                                     std::size_t padded_length) {
  return local_loss_counts(policy, layout).normalizer(mode, static_cast<double>(padded_length));
}

// actor.global_batch_info: the step's normaliser from the global counts veRL's trainer
// passes (batch_num_tokens, global_batch_size, loss_scale_factor). veRL's agg_loss also
// multiplies the rank's loss by dp_size, which undoes its engine's averaging of gradients
// over the data-parallel ranks; cascade_rl's rank losses are shares of the step's loss
// and their gradients are summed across ranks (distributed/), so dp_size is left out:
// veRL's value is this loss times dp_size (multiply the gradient likewise under an
// engine that averages).
[[nodiscard]] inline loss_normalizer global_batch_normalizer(loss_aggregation mode,
                                                             double batch_num_tokens,
                                                             double global_batch_size,
                                                             double loss_scale_factor) {
  return {.mode = mode,
          .tokens = batch_num_tokens,
          .sequences = global_batch_size,
          .scale = loss_scale_factor};
}

// compute_policy_loss_clip_cov: clip_ratio_low / clip_ratio_high (no dual clip, no
// log-ratio clamp), policy_loss.clip_cov_ratio / clip_cov_lb / clip_cov_ub (veRL's
// fallbacks 0.0002, 1.0 and 5.0 when unset), the actor's loss_agg_mode. The selection is
// the call's token_selection (replay veRL's draw, or our seeded one).
[[nodiscard]] inline clip_cov_options clip_cov(loss_aggregation mode = loss_aggregation::token_mean,
                                               double clip_ratio_low = 0.2,
                                               double clip_ratio_high = 0.2,
                                               double clip_cov_ratio = 0.0002,
                                               double clip_cov_lb = 1.0, double clip_cov_ub = 5.0) {
  return {.clip_low = clip_ratio_low,
          .clip_high = clip_ratio_high,
          .clip_cov_ratio = clip_cov_ratio,
          .clip_cov_lb = clip_cov_lb,
          .clip_cov_ub = clip_cov_ub,
          .aggregation = mode};
}

}  // namespace cascade_rl::presets::verl

// ---- the sequence-level ratio losses -------------------------------------------------

namespace cascade_rl::presets::verl {

// compute_policy_loss_gspo: clip_ratio_low / clip_ratio_high on the sequence ratio, its
// log clamped at 10 from above only, and seq-mean-token-mean whatever the actor's
// loss_agg_mode (veRL ignores it for GSPO; cascade_rl's gspo_options honours its
// aggregation, this preset fixes it).
[[nodiscard]] inline gspo_options gspo(double clip_ratio_low = 0.2, double clip_ratio_high = 0.2) {
  return {.clip_low = clip_ratio_low,
          .clip_high = clip_ratio_high,
          .log_ratio_bound = 10.0,
          .aggregation = loss_aggregation::seq_mean_token_mean};
}

// compute_policy_loss_geo_mean: clip_ratio_low / clip_ratio_high on the token log-ratios,
// and the plain mean over the batch's N rows whatever the actor's loss_agg_mode or
// global_batch_info: seq-mean-token-mean (each row's tokens carry its loss) over
// geo_mean_normalizer's count of every row, fully masked ones included.
[[nodiscard]] inline geo_mean_options geo_mean(double clip_ratio_low = 0.2,
                                               double clip_ratio_high = 0.2) {
  return {.clip_low = clip_ratio_low,
          .clip_high = clip_ratio_high,
          .aggregation = loss_aggregation::seq_mean_token_mean};
}

// veRL's divisor for GMPO: torch.mean over the micro-batch's rows, all of them (a fully
// masked row adds 0 and counts). Not partition-invariant: each micro-batch is its own mean.
[[nodiscard]] inline loss_normalizer geo_mean_normalizer(const token_layout& layout) {
  return {.mode = loss_aggregation::seq_mean_token_mean,
          .sequences = static_cast<double>(layout.sequences())};
}

// compute_policy_loss_kl_cov: policy_loss.kl_cov_ratio / ppo_kl_coef (veRL's fallbacks
// 0.0002 and 1.0 when unset; its actor.yaml sets ppo_kl_coef 0.1), the actor's
// loss_agg_mode. The selection is kl_cov_selection's (veRL's topk up to the order of ties)
// or the call's token_selection::replay.
[[nodiscard]] inline kl_cov_options kl_cov(loss_aggregation mode = loss_aggregation::token_mean,
                                           double kl_cov_ratio = 0.0002, double ppo_kl_coef = 1.0) {
  return {.kl_cov_ratio = kl_cov_ratio, .ppo_kl_coef = ppo_kl_coef, .aggregation = mode};
}

}  // namespace cascade_rl::presets::verl
