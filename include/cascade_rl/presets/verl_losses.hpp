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
// clip_ratio_c; veRL's rollout_is_weights are the inputs' rollout_is_weights.
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
[[nodiscard]] inline dppo_options dppo(dppo_divergence divergence,
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

// ---- the rollout correction and the bypass mode ----------------------------------------

#include <charconv>
#include <optional>
#include <vector>

#include "cascade_rl/options/rollout_correction.hpp"

namespace cascade_rl::presets::verl {

namespace rollout_correction_detail {

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A number as Python's float() reads the decimal forms veRL's configs hold.
inline double number(std::string_view text, std::string_view argument, std::string_view whole) {
  const std::string_view t = trim(text);
  double value = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (t.empty() || ec != std::errc{} || end != t.data() + t.size()) {
    std::string problem = "is \"";
    problem.append(whole).append("\", where \"").append(t).append("\" is not a number");
    cascade_rl::detail::fail(argument, problem);
  }
  return value;
}

struct rs_name {
  std::string_view name;
  rollout_rs_level level;
  rollout_rs_statistic statistic;
};
inline constexpr rs_name rs_names[] = {
    {"token_k1", rollout_rs_level::token, rollout_rs_statistic::k1},
    {"token_k2", rollout_rs_level::token, rollout_rs_statistic::k2},
    {"token_k3", rollout_rs_level::token, rollout_rs_statistic::k3},
    {"seq_sum_k1", rollout_rs_level::seq_sum, rollout_rs_statistic::k1},
    {"seq_sum_k2", rollout_rs_level::seq_sum, rollout_rs_statistic::k2},
    {"seq_sum_k3", rollout_rs_level::seq_sum, rollout_rs_statistic::k3},
    {"seq_mean_k1", rollout_rs_level::seq_mean, rollout_rs_statistic::k1},
    {"seq_mean_k2", rollout_rs_level::seq_mean, rollout_rs_statistic::k2},
    {"seq_mean_k3", rollout_rs_level::seq_mean, rollout_rs_statistic::k3},
    {"seq_max_k2", rollout_rs_level::seq_max, rollout_rs_statistic::k2},
    {"seq_max_k3", rollout_rs_level::seq_max, rollout_rs_statistic::k3},
};

// The comma-separated non-empty parts of `text`, trimmed.
inline std::vector<std::string_view> parts(std::string_view text) {
  std::vector<std::string_view> out;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view part = trim(text.substr(0, comma));
    if (!part.empty()) out.push_back(part);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace rollout_correction_detail

// veRL's rollout correction config (algorithm.rollout_correction, or
// policy_loss.rollout_correction in bypass mode): rollout_is "token" / "sequence" / unset,
// rollout_is_threshold a number (truncated IS at that upper bound) or "lower_upper"
// (IcePop), rollout_is_batch_normalize, rollout_rs a comma-separated list of criteria
// (token_k1..3, seq_sum_k1..3, seq_mean_k1..3, seq_max_k2..3; repeats dropped) and
// rollout_rs_threshold one spec shared by all or one per criterion ("lower_upper" or an
// upper bound u, then lower 1/u, for k1; an upper bound for the others). Numbers are given
// as text (a config's 2.0 as "2.0"). Refused as veRL refuses them, by argument name.
[[nodiscard]] inline rollout_correction_options rollout_correction(
    std::optional<std::string_view> rollout_is,
    std::optional<std::string_view> rollout_is_threshold, bool rollout_is_batch_normalize = false,
    std::optional<std::string_view> rollout_rs = {},
    std::optional<std::string_view> rollout_rs_threshold = {}) {
  namespace rc = rollout_correction_detail;
  rollout_correction_options options;
  options.batch_normalize = rollout_is_batch_normalize;
  if (rollout_is && rollout_is_threshold) {
    if (*rollout_is == "token")
      options.is_level = rollout_is_level::token;
    else if (*rollout_is == "sequence")
      options.is_level = rollout_is_level::sequence;
    else {
      std::string problem = "is \"";
      problem.append(*rollout_is).append("\", expected token or sequence (or unset)");
      cascade_rl::detail::fail("rollout_is", problem);
    }
    const std::string_view spec = rc::trim(*rollout_is_threshold);
    const std::size_t underscore = spec.find('_');
    if (underscore == std::string_view::npos) {
      options.is_upper = rc::number(spec, "rollout_is_threshold", spec);
    } else {
      options.is_lower = rc::number(spec.substr(0, underscore), "rollout_is_threshold", spec);
      options.is_upper = rc::number(spec.substr(underscore + 1), "rollout_is_threshold", spec);
    }
    if (!(options.is_upper > 0))
      cascade_rl::detail::fail(
          "rollout_is_threshold",
          "has upper bound " + std::to_string(options.is_upper) + ", expected > 0");
    if (options.is_lower && !(*options.is_lower > 0 && *options.is_lower <= options.is_upper))
      cascade_rl::detail::fail(
          "rollout_is_threshold",
          "has lower bound " + std::to_string(*options.is_lower) + ", expected 0 < lower <= upper");
  }
  if (rollout_rs) {
    if (!rollout_rs_threshold)
      cascade_rl::detail::fail("rollout_rs_threshold",
                               "is not set; rejection sampling (rollout_rs) needs it");
    std::vector<rc::rs_name> chosen;
    const auto names = rc::parts(*rollout_rs);
    if (names.empty()) cascade_rl::detail::fail("rollout_rs", "names no criterion");
    for (const std::string_view name : names) {
      const rc::rs_name* found = nullptr;
      for (const rc::rs_name& entry : rc::rs_names)
        if (entry.name == name) found = &entry;
      if (!found) {
        std::string problem = "names \"";
        problem.append(name).append("\", not a veRL criterion (");
        for (const rc::rs_name& entry : rc::rs_names)
          problem.append(&entry == rc::rs_names ? "" : ", ").append(entry.name);
        problem.append(")");
        cascade_rl::detail::fail("rollout_rs", problem);
      }
      bool seen = false;
      for (const rc::rs_name& c : chosen) seen = seen || c.name == name;
      if (!seen) chosen.push_back(*found);
    }
    auto specs = rc::parts(*rollout_rs_threshold);
    if (specs.empty()) cascade_rl::detail::fail("rollout_rs_threshold", "holds no threshold");
    if (specs.size() != 1 && specs.size() != chosen.size())
      cascade_rl::detail::fail("rollout_rs_threshold",
                               "holds " + std::to_string(specs.size()) +
                                   " thresholds, expected 1 or one per criterion (" +
                                   std::to_string(chosen.size()) + ")");
    for (std::size_t c = 0; c < chosen.size(); ++c) {
      const std::string_view spec = specs.size() == 1 ? specs[0] : specs[c];
      rollout_rs_criterion& r = options.rejection[c];
      r.level = chosen[c].level;
      r.statistic = chosen[c].statistic;
      const std::size_t underscore = spec.find('_');
      if (r.statistic == rollout_rs_statistic::k1) {
        if (underscore == std::string_view::npos) {
          r.upper = rc::number(spec, "rollout_rs_threshold", spec);
          r.lower = 1.0 / r.upper;
        } else {
          r.lower = rc::number(spec.substr(0, underscore), "rollout_rs_threshold", spec);
          r.upper = rc::number(spec.substr(underscore + 1), "rollout_rs_threshold", spec);
        }
        if (!(r.lower > 0 && r.upper > 0 && r.lower <= r.upper)) {
          std::string problem = "is \"";
          problem.append(spec)
              .append("\" for ")
              .append(chosen[c].name)
              .append(", expected positive bounds with lower <= upper");
          cascade_rl::detail::fail("rollout_rs_threshold", problem);
        }
      } else {
        if (underscore != std::string_view::npos) {
          std::string problem = "is \"";
          problem.append(spec)
              .append("\" for ")
              .append(chosen[c].name)
              .append(", which takes a single upper bound without '_'");
          cascade_rl::detail::fail("rollout_rs_threshold", problem);
        }
        r.upper = rc::number(spec, "rollout_rs_threshold", spec);
        if (!(r.upper > 0)) {
          std::string problem = "is \"";
          problem.append(spec)
              .append("\" for ")
              .append(chosen[c].name)
              .append(", expected a positive bound");
          cascade_rl::detail::fail("rollout_rs_threshold", problem);
        }
      }
    }
    options.rejection_count = chosen.size();
  }
  return options;
}

// compute_policy_loss_bypass_mode: the correction, then loss_type "ppo_clip"
// (compute_policy_loss_vanilla: clip_ratio_low / high, dual clip clip_ratio_c, the clamp
// of +-20, no IS weights) or "reinforce" (compute_policy_loss_reinforce: -w A logp), both
// with the actor's loss_agg_mode on the rejection-masked tokens.
[[nodiscard]] inline bypass_mode_options bypass_mode(
    const rollout_correction_options& correction, std::string_view loss_type = "ppo_clip",
    loss_aggregation mode = loss_aggregation::token_mean, double clip_ratio_low = 0.2,
    double clip_ratio_high = 0.2, double clip_ratio_c = 3.0) {
  bypass_mode_options options;
  options.correction = correction;
  if (loss_type == "ppo_clip")
    options.loss = bypass_loss::ppo_clip;
  else if (loss_type == "reinforce")
    options.loss = bypass_loss::reinforce;
  else {
    std::string problem = "is \"";
    problem.append(loss_type).append("\", expected reinforce or ppo_clip");
    cascade_rl::detail::fail("rollout_correction.loss_type", problem);
  }
  options.ppo = ppo_clip(mode, clip_ratio_low, clip_ratio_high, clip_ratio_c);
  options.reinforce = gpg_loss(mode);
  return options;
}

}  // namespace cascade_rl::presets::verl
