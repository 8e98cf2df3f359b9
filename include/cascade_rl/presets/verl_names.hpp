#pragma once
// veRL's own config names, for people porting a veRL config: policy_loss(loss_mode),
// adv_estimator(name) and loss_agg_mode(name) return cascade_rl's options with veRL's
// conventions (the presets of verl_losses.hpp and verl_advantages.hpp), kl_penalty(type)
// is in verl_losses.hpp. Each kind of name has one table; an unknown name is refused with
// the valid ones listed, and a name veRL has that cascade_rl does not implement yet is
// refused as such. A loss or estimator added later registers by adding a row (and an
// alternative to the variant it returns).
//
// Names as veRL spells them at commit 1dda039: actor_rollout_ref.actor.policy_loss.loss_mode
// (@register_policy_loss in verl/trainer/ppo/core_algos.py), algorithm.adv_estimator (the
// AdvantageEstimator enum), actor_rollout_ref.actor.loss_agg_mode.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "cascade_rl/core/error.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/options/rollout_correction.hpp"
#include "cascade_rl/presets/verl_advantages.hpp"
#include "cascade_rl/presets/verl_losses.hpp"

namespace cascade_rl::presets::verl {

// The actor fields veRL's policy losses read, with veRL's defaults: clip_ratio_low and
// clip_ratio_high fall back to clip_ratio when unset; tis_imp_ratio_cap set turns on
// truncated importance sampling against the rollout log-probs.
struct actor_config {
  std::string_view loss_agg_mode = "token-mean";
  double clip_ratio = 0.2;
  std::optional<double> clip_ratio_low{};
  std::optional<double> clip_ratio_high{};
  double clip_ratio_c = 3.0;
  std::optional<double> tis_imp_ratio_cap{};
  std::optional<double> dro_beta{};  // policy_loss.dro_beta: DRO only, required there
  double tau_pos = 1.0;              // SAPO
  double tau_neg = 1.05;             // SAPO
  // policy_loss.clip_cov_ratio / clip_cov_lb / clip_cov_ub: Clip-Cov (unset: veRL's 0.0002,
  // 1.0, 5.0).
  std::optional<double> clip_cov_ratio{};
  std::optional<double> clip_cov_lb{};
  std::optional<double> clip_cov_ub{};
  // policy_loss.kl_cov_ratio / ppo_kl_coef: KL-Cov (unset: veRL's fallbacks 0.0002, 1.0;
  // veRL's actor.yaml sets ppo_kl_coef 0.1).
  std::optional<double> kl_cov_ratio{};
  std::optional<double> ppo_kl_coef{};
  // policy_loss.rollout_correction.*: the bypass mode (loss_type, rollout_is,
  // rollout_is_threshold as text: "2.0" or "lower_upper", rollout_is_batch_normalize,
  // rollout_rs, rollout_rs_threshold); see verl::rollout_correction.
  std::string_view rollout_correction_loss_type = "ppo_clip";
  std::optional<std::string_view> rollout_is{};
  std::optional<std::string_view> rollout_is_threshold = "2.0";
  bool rollout_is_batch_normalize = false;
  std::optional<std::string_view> rollout_rs{};
  std::optional<std::string_view> rollout_rs_threshold{};
};

// The algorithm fields veRL's advantage estimators read, with veRL's defaults.
struct algorithm_config {
  bool norm_adv_by_std_in_grpo = true;  // false: Dr. GRPO
  double gamma = 1.0;                   // REINFORCE++'s and GAE's discount
  double lam = 1.0;                     // GAE's lambda
};

// What a name can stand for; each loss or estimator added later adds its options here.
using policy_loss_options =
    std::variant<ppo_clip_options, cispo_options, reinforce_options, dppo_options, dro_options,
                 sapo_options, gspo_options, geo_mean_options, clip_cov_options, kl_cov_options,
                 bypass_mode_options>;
using advantage_estimator_options =
    std::variant<grpo_options, rloo_options, reinforce_plus_plus_options,
                 reinforce_plus_plus_baseline_options, gae_options, remax_options, opo_options,
                 gpg_options, grpo_passk_options, gdpo_options, optimal_token_baseline_options>;

namespace registry {

template <class Options, class Config>
struct entry {
  std::string_view name;
  Options (*make)(const Config&);
};

inline policy_loss_options vanilla(const actor_config& c) {
  const loss_aggregation mode = loss_agg_mode(c.loss_agg_mode);
  const double low = c.clip_ratio_low.value_or(c.clip_ratio);
  const double high = c.clip_ratio_high.value_or(c.clip_ratio);
  if (c.tis_imp_ratio_cap)
    return ppo_clip_with_tis(*c.tis_imp_ratio_cap, mode, low, high, c.clip_ratio_c);
  return ppo_clip(mode, low, high, c.clip_ratio_c);
}

inline policy_loss_options cispo(const actor_config& c) {
  return verl::cispo(loss_agg_mode(c.loss_agg_mode), c.clip_ratio_low.value_or(c.clip_ratio),
                     c.clip_ratio_high.value_or(c.clip_ratio));
}

template <dppo_divergence D>
policy_loss_options dppo(const actor_config& c) {
  return verl::dppo(D, loss_agg_mode(c.loss_agg_mode), c.clip_ratio_low.value_or(c.clip_ratio),
                    c.clip_ratio_high.value_or(c.clip_ratio), c.clip_ratio_c);
}

inline policy_loss_options dro(const actor_config& c) {
  if (!c.dro_beta || !(*c.dro_beta > 0))
    cascade_rl::detail::fail("policy_loss.dro_beta",
                             c.dro_beta ? "is " + std::to_string(*c.dro_beta) + ", expected > 0"
                                        : std::string("is not set; DRO needs a positive value"));
  return verl::dro(*c.dro_beta, loss_agg_mode(c.loss_agg_mode));
}

inline constexpr entry<policy_loss_options, actor_config> policy_losses[] = {
    {"vanilla", &vanilla},
    {"dppo_tv", &dppo<dppo_divergence::total_variation>},
    {"dppo_kl", &dppo<dppo_divergence::binary_kl>},
    {"sapo",
     [](const actor_config& c) -> policy_loss_options {
       return sapo(c.tau_pos, c.tau_neg);  // loss_agg_mode ignored, as veRL does
     }},
    {"dro", &dro},
    {"cispo", &cispo},
    {"gspo",
     [](const actor_config& c) -> policy_loss_options {
       // loss_agg_mode ignored, as veRL does
       return gspo(c.clip_ratio_low.value_or(c.clip_ratio),
                   c.clip_ratio_high.value_or(c.clip_ratio));
     }},
    {"geo_mean",
     [](const actor_config& c) -> policy_loss_options {
       // loss_agg_mode ignored, as veRL does (normalise with verl::geo_mean_normalizer)
       return geo_mean(c.clip_ratio_low.value_or(c.clip_ratio),
                       c.clip_ratio_high.value_or(c.clip_ratio));
     }},
    {"gpg",
     [](const actor_config& c) -> policy_loss_options {
       return gpg_loss(loss_agg_mode(c.loss_agg_mode));
     }},
    {"clip_cov",
     [](const actor_config& c) -> policy_loss_options {
       return verl::clip_cov(
           loss_agg_mode(c.loss_agg_mode), c.clip_ratio_low.value_or(c.clip_ratio),
           c.clip_ratio_high.value_or(c.clip_ratio), c.clip_cov_ratio.value_or(0.0002),
           c.clip_cov_lb.value_or(1.0), c.clip_cov_ub.value_or(5.0));
     }},
    {"kl_cov",
     [](const actor_config& c) -> policy_loss_options {
       return verl::kl_cov(loss_agg_mode(c.loss_agg_mode), c.kl_cov_ratio.value_or(0.0002),
                           c.ppo_kl_coef.value_or(1.0));
     }},
    {"bypass_mode",
     [](const actor_config& c) -> policy_loss_options {
       return verl::bypass_mode(
           rollout_correction(c.rollout_is, c.rollout_is_threshold, c.rollout_is_batch_normalize,
                              c.rollout_rs, c.rollout_rs_threshold),
           c.rollout_correction_loss_type, loss_agg_mode(c.loss_agg_mode),
           c.clip_ratio_low.value_or(c.clip_ratio), c.clip_ratio_high.value_or(c.clip_ratio),
           c.clip_ratio_c);
     }},
};
// Every policy loss veRL registers is implemented (the issue "Algorithms wave 2" added the
// last); a name added to veRL later goes here until it is.
inline constexpr std::span<const std::string_view> policy_losses_not_yet{};

inline constexpr entry<advantage_estimator_options, algorithm_config> advantage_estimators[] = {
    {"grpo",
     [](const algorithm_config& c) -> advantage_estimator_options {
       return grpo(c.norm_adv_by_std_in_grpo);
     }},
    {"rloo", [](const algorithm_config&) -> advantage_estimator_options { return rloo(); }},
    {"reinforce_plus_plus",
     [](const algorithm_config& c) -> advantage_estimator_options {
       return reinforce_plus_plus(c.gamma);
     }},
    {"reinforce_plus_plus_baseline",
     [](const algorithm_config&) -> advantage_estimator_options {
       return reinforce_plus_plus_baseline();
     }},
    {"gae",
     [](const algorithm_config& c) -> advantage_estimator_options { return gae(c.gamma, c.lam); }},
    {"remax", [](const algorithm_config&) -> advantage_estimator_options { return remax(); }},
    {"opo", [](const algorithm_config&) -> advantage_estimator_options { return opo(); }},
    {"gpg", [](const algorithm_config&) -> advantage_estimator_options { return gpg(); }},
    {"grpo_vectorized",
     [](const algorithm_config&) -> advantage_estimator_options { return grpo_vectorized(); }},
    {"rloo_vectorized",
     [](const algorithm_config&) -> advantage_estimator_options { return rloo_vectorized(); }},
    {"gdpo",
     [](const algorithm_config& c) -> advantage_estimator_options {
       return gdpo(c.norm_adv_by_std_in_grpo);
     }},
    {"grpo_passk",
     [](const algorithm_config& c) -> advantage_estimator_options {
       return grpo_passk(c.norm_adv_by_std_in_grpo);
     }},
    {"optimal_token_baseline",
     [](const algorithm_config&) -> advantage_estimator_options {
       return optimal_token_baseline();
     }},
    {"tir_optimal_token_baseline",
     [](const algorithm_config&) -> advantage_estimator_options {
       return tir_optimal_token_baseline();
     }},
};
// Every veRL estimator is implemented.
inline constexpr std::span<const std::string_view> advantage_estimators_not_yet{};

inline void append_list(std::string& out, std::span<const std::string_view> names) {
  for (std::size_t i = 0; i < names.size(); ++i) out.append(i == 0 ? "" : ", ").append(names[i]);
}

// The entry named `name`, or an error on `argument` listing the valid names.
template <class Options, class Config, std::size_t N>
Options make(std::string_view argument, std::string_view name,
             const entry<Options, Config> (&table)[N], std::span<const std::string_view> not_yet,
             const Config& config) {
  for (const auto& e : table)
    if (e.name == name) return e.make(config);
  std::string problem = "is \"";
  problem.append(name);
  bool known_to_verl = false;
  for (const auto n : not_yet) known_to_verl = known_to_verl || n == name;
  problem.append(known_to_verl ? "\", a veRL name cascade_rl does not implement yet; implemented: "
                               : "\", not a veRL name; implemented: ");
  std::string_view names[N];
  for (std::size_t i = 0; i < N; ++i) names[i] = table[i].name;
  append_list(problem, names);
  if (!not_yet.empty()) {
    problem.append(" (veRL's ");
    append_list(problem, not_yet);
    problem.append(" are not implemented yet)");
  }
  cascade_rl::detail::fail(argument, problem);
}

}  // namespace registry

// actor.policy_loss.loss_mode with the actor's clip fields and loss_agg_mode.
[[nodiscard]] inline policy_loss_options policy_loss(std::string_view loss_mode,
                                                     const actor_config& config = {}) {
  return registry::make("loss_mode", loss_mode, registry::policy_losses,
                        registry::policy_losses_not_yet, config);
}

// algorithm.adv_estimator with the algorithm's fields.
[[nodiscard]] inline advantage_estimator_options adv_estimator(
    std::string_view name, const algorithm_config& config = {}) {
  return registry::make("adv_estimator", name, registry::advantage_estimators,
                        registry::advantage_estimators_not_yet, config);
}

}  // namespace cascade_rl::presets::verl
