#pragma once
// The options of the policy-gradient losses (algorithms/policy_loss.hpp,
// sequence_ratio_losses.hpp, covariance_losses.hpp): plain values that the token terms,
// every executor's driver and the kernels take as they are. Each loss's options describe
// themselves (detail::config_fields, options/described.hpp): their name (veRL's
// loss_mode where veRL has the loss) and their fields, which the engine's update rule,
// its JSON and its error paths are derived from; the aggregation is described apart,
// since a stage sets it once for every rule.

#include <optional>
#include <string_view>
#include <tuple>

#include "cascade_rl/options/described.hpp"
#include "cascade_rl/options/importance.hpp"
#include "cascade_rl/options/loss_normalizer.hpp"

namespace cascade_rl {

// The value REINFORCE reports; both have the same gradient -w_t * A_t.
enum class reinforce_surrogate {
  // l_t = -A_t * exp(logp_t - stopgrad(logp_t)), whose value is -A_t (veRL/PPO at ratio 1).
  ratio,
  // l_t = -A_t * logp_t, the textbook form (and MOPD's -w_t * a_t * log pi_train).
  log_prob,
};

struct reinforce_options {
  loss_aggregation aggregation = loss_aggregation::token_mean;
  reinforce_surrogate surrogate = reinforce_surrogate::ratio;
  // Target of the ratio is the trainer's own log-probs (stop-gradient).
  importance_options importance{};
};

struct ppo_clip_options {
  double clip_low = 0.2;   // ratio floor 1 - clip_low, in [0, 1)
  double clip_high = 0.2;  // ratio ceiling 1 + clip_high, >= 0 (DAPO clip-higher: 0.28)
  // Dual clip constant c > 1: for A < 0 the loss is at most -A * c. nullopt: off.
  std::optional<double> dual_clip{};
  // |logp - old_logp| is clamped to this before exp (veRL: 20) so the ratio cannot
  // overflow; the gradient is 0 where the clamp is active.
  double log_ratio_clamp = 20.0;
  loss_aggregation aggregation = loss_aggregation::token_mean;
  // Target of the ratio is old_log_probs (veRL TIS: exp(old_log_prob - rollout_log_probs)).
  importance_options importance{};
};

// CISPO: the ratio to the old policy clipped to [1 - clip_low, 1 + clip_high] and used
// as a stop-gradient weight (MiniMax-M1's epsilon_low is often large: no floor). Only
// the inputs' rollout_is_weights correct for the sampler; there is no importance option.
struct cispo_options {
  double clip_low = 0.2;   // >= 0; 1 - clip_low <= 0 leaves the ratio without a floor
  double clip_high = 0.2;  // >= 0
  // |logp - old_logp| is clamped to this before exp (veRL: 20); the gradient does not
  // see the clamp (the weight is a stop-gradient).
  double log_ratio_clamp = 20.0;
  loss_aggregation aggregation = loss_aggregation::token_mean;
};

// SAPO: a sigmoid gate of the ratio instead of PPO's clip, with a temperature for each
// sign of the advantage. Aggregated like every loss by `aggregation` over the step's
// normaliser (veRL always aggregates seq-mean-token-mean whatever loss_agg_mode says:
// presets::verl::sapo does the same).
struct sapo_options {
  double tau_pos = 1.0;           // A > 0, > 0
  double tau_neg = 1.05;          // A <= 0, > 0
  double log_ratio_clamp = 20.0;  // > 0; the gradient is 0 where it acts (veRL: 20)
  loss_aggregation aggregation = loss_aggregation::token_mean;
};

// SAPO at sequence level (TRL's loss_type "sapo" with importance_sampling_level
// "sequence"): SAPO's gate of the row's ratio s = exp(mean log-ratio over the row's valid
// tokens) instead of each token's ratio, no clamp. The gate couples a row's tokens: the
// gradient reaching each token is the row's summed derivative times s / its valid tokens.
struct sequence_sapo_options {
  double tau_pos = 1.0;   // A > 0, > 0
  double tau_neg = 1.05;  // A <= 0, > 0
  loss_aggregation aggregation = loss_aggregation::token_mean;
};

// DRO: -A * logp plus the proximal penalty beta/2 * (logp - old_logp)^2 instead of a
// clip. beta has no default (veRL refuses a DRO without dro_beta): it must be > 0.
struct dro_options {
  double beta = 0;
  loss_aggregation aggregation = loss_aggregation::token_mean;
};

// DPPO's trust region: the total variation p - p_old of the sampled token's probability,
// or the binary KL of Bernoulli(p_old) from Bernoulli(p).
enum class dppo_divergence { total_variation, binary_kl };

// DPPO-Binary-TV / -KL: the ratio to the old policy truncated at `truncation` as a
// stop-gradient weight on -A * logp, the token dropped (weight 0) where the policy left
// the trust region on its advantage's side: for A > 0 a divergence above clip_high, for
// A <= 0 above clip_low (total variation: p - p_old > clip_high, p_old - p > clip_low;
// binary KL: only moves toward the advantage count). The thresholds are divergences, not
// ratio ranges, though veRL reads them from clip_ratio_low / clip_ratio_high.
struct dppo_options {
  dppo_divergence divergence = dppo_divergence::total_variation;
  double clip_low = 0.2;   // >= 0
  double clip_high = 0.2;  // >= 0
  // c > 0: the weight is min(r, c) (the DPPO paper's truncated IS, a large c recommended;
  // veRL passes the actor's clip_ratio_c, 3 by default).
  double truncation = 20.0;
  double log_ratio_clamp = 20.0;  // |logp - old_logp| before exp, > 0 (veRL: 20)
  loss_aggregation aggregation = loss_aggregation::token_mean;
};

namespace detail {

template <>
struct config_fields<ppo_clip_options> {
  using T = ppo_clip_options;
  static constexpr std::string_view alternative = "ppo_clip";
  static constexpr std::tuple list{
      config_field{"clip_low", &T::clip_low},
      config_field{"clip_high", &T::clip_high},
      config_field{"dual_clip", &T::dual_clip},
      config_field{"log_ratio_clamp", &T::log_ratio_clamp},
      config_field{"importance", &T::importance}};
  static constexpr auto aggregation = &T::aggregation;
};

template <>
struct config_fields<cispo_options> {
  using T = cispo_options;
  static constexpr std::string_view alternative = "cispo";
  static constexpr std::tuple list{
      config_field{"clip_low", &T::clip_low},
      config_field{"clip_high", &T::clip_high},
      config_field{"log_ratio_clamp", &T::log_ratio_clamp}};
  static constexpr auto aggregation = &T::aggregation;
};

template <>
struct config_fields<sapo_options> {
  using T = sapo_options;
  static constexpr std::string_view alternative = "sapo";
  static constexpr std::tuple list{
      config_field{"tau_pos", &T::tau_pos},
      config_field{"tau_neg", &T::tau_neg},
      config_field{"log_ratio_clamp", &T::log_ratio_clamp}};
  static constexpr auto aggregation = &T::aggregation;
};

template <>
struct config_fields<sequence_sapo_options> {
  using T = sequence_sapo_options;
  static constexpr std::string_view alternative = "sequence_sapo";
  static constexpr std::tuple list{config_field{"tau_pos", &T::tau_pos},
                                   config_field{"tau_neg", &T::tau_neg}};
  static constexpr auto aggregation = &T::aggregation;
};

template <>
struct config_fields<dro_options> {
  using T = dro_options;
  static constexpr std::string_view alternative = "dro";
  static constexpr std::tuple list{
      config_field{"beta", &T::beta}};
  static constexpr auto aggregation = &T::aggregation;
};

template <>
struct config_fields<dppo_options> {
  using T = dppo_options;
  static constexpr std::string_view alternative = "dppo";
  static constexpr std::tuple list{
      config_field{"divergence", &T::divergence},
      config_field{"clip_low", &T::clip_low},
      config_field{"clip_high", &T::clip_high},
      config_field{"truncation", &T::truncation},
      config_field{"log_ratio_clamp", &T::log_ratio_clamp}};
  static constexpr auto aggregation = &T::aggregation;
};

}  // namespace detail

// MOPD (Nemotron-Cascade 2): -(1/|V|) sum_t w_t * a_t * log pi_train(y_t) with
// w_t = r_t * 1[0.5 <= r_t <= 2], r_t = pi_train / pi_rollout (stop-gradient), and a_t =
// teacher logp - student logp passed as the advantages. |V| counts every valid token,
// band-dropped ones included: normalise with the step's total valid tokens.
[[nodiscard]] inline reinforce_options mopd_options(double band_low = 0.5, double band_high = 2.0) {
  return {.aggregation = loss_aggregation::token_mean,
          .surrogate = reinforce_surrogate::log_prob,
          .importance = {.mode = importance_sampling::band_mask,
                         .band_low = band_low,
                         .band_high = band_high}};
}

// ---- the sequence-level ratio losses (algorithms/sequence_ratio_losses.hpp) ----------

// GSPO: PPO's clip on the sequence's ratio s = exp(mean log-ratio over its valid tokens)
// instead of the token's (arXiv 2507.18071 recommends tiny ranges, 3e-4 / 4e-4; veRL's
// actor defaults are 0.2). Only the inputs' rollout_is_weights correct for the sampler.
// Aggregated like every loss by `aggregation` over the step's normaliser (veRL always
// aggregates GSPO seq-mean-token-mean whatever loss_agg_mode says: presets::verl::gspo
// does the same).
struct gspo_options {
  double clip_low = 0.2;   // 0 <= clip_low < 1
  double clip_high = 0.2;  // >= 0
  // log s is clamped to at most this before exp, the gradient 0 above it (veRL: 10, no
  // lower clamp).
  double log_ratio_bound = 10.0;
  loss_aggregation aggregation = loss_aggregation::token_mean;
};

// GMPO (geometric-mean policy optimisation): each sequence's loss is -mean(A) times the
// geometric mean of its tokens' ratios, each token's log-ratio clipped to [-clip_low,
// clip_high] on its advantage's side only, times the geometric mean of its
// rollout_is_weights. Each valid token carries its row's loss, aggregated by `aggregation`
// over the step's normaliser (veRL takes a plain mean over all N rows, fully masked ones
// included, whatever loss_agg_mode or global_batch_info say: presets::verl::geo_mean with
// verl::geo_mean_normalizer does the same).
struct geo_mean_options {
  double clip_low = 0.2;   // >= 0
  double clip_high = 0.2;  // >= 0
  loss_aggregation aggregation = loss_aggregation::token_mean;
};

namespace detail {

template <>
struct config_fields<gspo_options> {
  using T = gspo_options;
  static constexpr std::string_view alternative = "gspo";
  static constexpr std::tuple list{
      config_field{"clip_low", &T::clip_low},
      config_field{"clip_high", &T::clip_high},
      config_field{"log_ratio_bound", &T::log_ratio_bound}};
  static constexpr auto aggregation = &T::aggregation;
};

template <>
struct config_fields<geo_mean_options> {
  using T = geo_mean_options;
  static constexpr std::string_view alternative = "geo_mean";
  static constexpr std::tuple list{
      config_field{"clip_low", &T::clip_low},
      config_field{"clip_high", &T::clip_high}};
  static constexpr auto aggregation = &T::aggregation;
};

}  // namespace detail

// ---- the covariance-selected losses (algorithms/covariance_losses.hpp) ----------------

// Clip-Cov (veRL compute_policy_loss_clip_cov): PPO's clipped surrogate (no dual clip, no
// log-ratio clamp) whose gradient is stopped on clip_cov_ratio of the valid tokens, drawn
// among those with clip_cov_lb < cov < clip_cov_ub (see covariance_losses.hpp). Defaults
// are veRL's.
struct clip_cov_options {
  double clip_low = 0.2;           // ratio floor 1 - clip_low, >= 0
  double clip_high = 0.2;          // ratio ceiling 1 + clip_high, >= 0
  double clip_cov_ratio = 0.0002;  // > 0: max(floor(ratio * valid tokens), 1) are selected
  double clip_cov_lb = 1.0;
  double clip_cov_ub = 5.0;
  loss_aggregation aggregation = loss_aggregation::token_mean;
};

namespace detail {

template <>
struct config_fields<clip_cov_options> {
  using T = clip_cov_options;
  static constexpr std::string_view alternative = "clip_cov";
  static constexpr std::tuple list{
      config_field{"clip_low", &T::clip_low},
      config_field{"clip_high", &T::clip_high},
      config_field{"clip_cov_ratio", &T::clip_cov_ratio},
      config_field{"clip_cov_lb", &T::clip_cov_lb},
      config_field{"clip_cov_ub", &T::clip_cov_ub}};
  static constexpr auto aggregation = &T::aggregation;
};
}  // namespace detail

// KL-Cov (veRL compute_policy_loss_kl_cov): the unclipped surrogate -A r, plus
// ppo_kl_coef |logp - old_logp| on the kl_cov_ratio of the valid tokens of largest
// covariance (see covariance_losses.hpp). Defaults are veRL's fallbacks for an unset
// field (0.0002, 1.0); veRL's actor.yaml sets ppo_kl_coef: 0.1.
struct kl_cov_options {
  double kl_cov_ratio = 0.0002;  // in (0, 1]: max(floor(ratio * valid tokens), 1) are selected
  double ppo_kl_coef = 1.0;      // finite, >= 0
  loss_aggregation aggregation = loss_aggregation::token_mean;
};

namespace detail {

template <>
struct config_fields<kl_cov_options> {
  using T = kl_cov_options;
  static constexpr std::string_view alternative = "kl_cov";
  static constexpr std::tuple list{
      config_field{"kl_cov_ratio", &T::kl_cov_ratio},
      config_field{"ppo_kl_coef", &T::ppo_kl_coef}};
  static constexpr auto aggregation = &T::aggregation;
};

static_assert(lists_every_member<importance_options> && lists_every_member<ppo_clip_options> &&
                  lists_every_member<cispo_options> && lists_every_member<sapo_options> &&
                  lists_every_member<sequence_sapo_options> &&
                  lists_every_member<dro_options> && lists_every_member<dppo_options> &&
                  lists_every_member<gspo_options> && lists_every_member<geo_mean_options> &&
                  lists_every_member<clip_cov_options> && lists_every_member<kl_cov_options>,
              "a loss's options gained a member: describe it in its config_fields");

}  // namespace detail

}  // namespace cascade_rl
