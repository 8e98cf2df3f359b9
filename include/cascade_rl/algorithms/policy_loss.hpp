#pragma once
// Policy-gradient losses with their gradient dL/dlogp per sampled token.
//
//   reinforce_loss  strictly on-policy REINFORCE, the GRPO of Cascade RL (one gradient
//                   step per rollout batch, so the ratio is identically 1 and PPO's
//                   clip is inert); with a band importance mask it is MOPD's loss.
//   ppo_clip_loss   PPO's clipped surrogate as in veRL compute_policy_loss_vanilla,
//                   with clip-higher (DAPO: separate low/high ranges) and dual clip
//                   (Ye et al. 2020, "Mastering Complex Control in MOBA Games").
//
// Each returns the aggregated loss (see loss_aggregation.hpp) and writes
// grad_out[t] = dL/dlogp_t for every token, 0 on masked tokens: the seed of the
// caller's backward pass. grad_out must not alias an input.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "cascade_rl/algorithms/importance_weights.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/terms/policy_gradient_tokens.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"

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

namespace detail {

inline void validate_ppo_options(const ppo_clip_options& options) {
  if (!(options.clip_low >= 0 && options.clip_low < 1))
    fail("options.clip_low", "is " + std::to_string(options.clip_low) +
                                 ", expected 0 <= clip_low < 1 (the ratio floor 1 - clip_low "
                                 "must stay positive)");
  if (!(options.clip_high >= 0))
    fail("options.clip_high", "is " + std::to_string(options.clip_high) + ", expected >= 0");
  if (options.dual_clip && !(*options.dual_clip > 1))
    fail("options.dual_clip", "is " + std::to_string(*options.dual_clip) +
                                  ", expected a constant > 1 (or nullopt to disable)");
  if (!(options.log_ratio_clamp > 0))
    fail("options.log_ratio_clamp",
         "is " + std::to_string(options.log_ratio_clamp) + ", expected > 0");
  validate_importance(options.importance, "options.importance");
}

template <class Policy, std::floating_point T>
void validate_token_input(const Policy& policy, const token_layout& layout,
                          std::span<const T> values, std::string_view argument) {
  require_size(values.size(), layout.tokens(), argument, "one per token");
  require_finite_where_valid(policy, values, layout, argument);
}

// The options as the plain values terms::ppo_clip_token takes.
inline terms::ppo_clip_params ppo_params_of(const ppo_clip_options& options) {
  return {options.clip_low, options.clip_high, options.dual_clip ? *options.dual_clip : 0.0,
          options.log_ratio_clamp};
}

// The checks shared by every policy loss after its own inputs', then grad_out filled
// with the aggregation weights that reduce_token_losses scales.
template <class Policy, std::floating_point T>
void prepare_policy_loss(const Policy& policy, const token_layout& layout,
                         std::span<const T> behaviour_log_probs, std::span<T> grad_out,
                         const loss_normalizer& normalizer, loss_aggregation aggregation,
                         const importance_options& importance) {
  validate_behaviour(policy, layout, behaviour_log_probs, importance);
  require_size(grad_out.size(), layout.tokens(), "grad_out", "one per token");
  validate_normalizer(policy, layout, normalizer, aggregation);
  write_aggregation_weights(policy, layout, normalizer, aggregation, grad_out);
}

// Whether the single-pass path (fused_token_losses) applies: every size is right, so
// that the only check left is finiteness, which rides along the loss pass; and the
// mode's weight is uniform with a usable normaliser.
template <std::floating_point T>
bool fused_loss_applies(const token_layout& layout, std::initializer_list<std::size_t> input_sizes,
                        std::span<const T> behaviour_log_probs, std::span<T> grad_out,
                        const loss_normalizer& normalizer, loss_aggregation aggregation,
                        const importance_options& importance, T& weight) {
  const std::size_t n = layout.tokens();
  for (const std::size_t size : input_sizes)
    if (size != n) return false;
  if (grad_out.size() != n) return false;
  if (importance.mode == importance_sampling::none
          ? !behaviour_log_probs.empty() && behaviour_log_probs.size() != n
          : behaviour_log_probs.size() != n)
    return false;
  return uniform_aggregation_weight(normalizer, aggregation, weight);
}

// The fused pass of a policy loss (see fused_token_losses) over its two token terms: the
// importance-weighted one, its behaviour log-probs checked too, when the options ask for
// a correction, else the unweighted one; each is its own loop, free of branches.
template <class Policy, std::floating_point T, class Nonfinite, class Unweighted, class Weighted>
checked_aggregate<policy_loss_metrics> fused_policy_loss(
    const Policy& policy, const token_layout& layout, std::span<T> grad_out, T weight,
    const importance_options& importance, std::span<const T> behaviour_log_probs,
    const Nonfinite& nonfinite, const Unweighted& unweighted_token,
    const Weighted& weighted_token) {
  if (importance.mode == importance_sampling::none)
    return fused_token_losses<policy_loss_metrics>(policy, layout, grad_out, weight, nonfinite,
                                                   unweighted_token);
  return fused_token_losses<policy_loss_metrics>(
      policy, layout, grad_out, weight,
      [&](std::size_t t) { return nonfinite(t) | nonfinite_at(behaviour_log_probs, t); },
      weighted_token);
}

}  // namespace detail

// Strictly on-policy REINFORCE: l_t = -w_t * A_t * ratio_t with ratio_t =
// exp(logp_t - stopgrad(logp_t)) == 1, so dl_t/dlogp_t = -w_t * A_t; no old log-probs.
// behaviour_log_probs (the sampler's) are read only when options.importance asks.
template <exec::host_policy Policy, std::floating_point T>
policy_loss_result reinforce_loss(const Policy& policy, const token_layout& layout,
                                  std::span<const T> log_probs, std::span<const T> advantages,
                                  std::span<const T> behaviour_log_probs, std::span<T> grad_out,
                                  const loss_normalizer& normalizer,
                                  const reinforce_options& options = {}) {
  detail::validate_importance(options.importance, "options.importance");
  // The token's loss and its importance-weighted form, each free of branches so that
  // the fused loss loop vectorises; `token` picks one (the checked path's term).
  const bool log_prob_surrogate = options.surrogate == reinforce_surrogate::log_prob;
  const bool corrected = options.importance.mode != importance_sampling::none;
  const auto unweighted_token = [&](std::size_t t, policy_loss_metrics& m) {
    ++m.valid_tokens;
    return terms::reinforce_token(static_cast<double>(log_probs[t]),
                                  static_cast<double>(advantages[t]), log_prob_surrogate);
  };
  const auto weighted_token = [&](std::size_t t, policy_loss_metrics& m) {
    return terms::importance_weighted(
        unweighted_token(t, m),
        static_cast<double>(log_probs[t]) - static_cast<double>(behaviour_log_probs[t]),
        options.importance, m);
  };
  const auto token = [&](std::size_t t, policy_loss_metrics& m) {
    return corrected ? weighted_token(t, m) : unweighted_token(t, m);
  };
  T weight{};
  if (detail::fused_loss_applies(layout, {log_probs.size(), advantages.size()},
                                 behaviour_log_probs, grad_out, normalizer, options.aggregation,
                                 options.importance, weight)) {
    const auto fused = detail::fused_policy_loss(
        policy, layout, grad_out, weight, options.importance, behaviour_log_probs,
        [&](std::size_t t) {
          return detail::nonfinite_at(log_probs, t) | detail::nonfinite_at(advantages, t);
        },
        unweighted_token, weighted_token);
    if (!fused.nonfinite) return {fused.total.loss, fused.total.metrics};
    // A bad input: the checks below name it as they always have.
  }
  detail::validate_token_input(policy, layout, log_probs, "log_probs");
  detail::validate_token_input(policy, layout, advantages, "advantages");
  detail::prepare_policy_loss(policy, layout, behaviour_log_probs, grad_out, normalizer,
                              options.aggregation, options.importance);
  const auto total = detail::reduce_token_losses<policy_loss_metrics>(policy, layout, grad_out, token);
  return {total.loss, total.metrics};
}

// Without behaviour log-probs: options.importance must be none.
template <exec::host_policy Policy, std::floating_point T>
policy_loss_result reinforce_loss(const Policy& policy, const token_layout& layout,
                                  std::span<const T> log_probs, std::span<const T> advantages,
                                  std::span<T> grad_out, const loss_normalizer& normalizer,
                                  const reinforce_options& options = {}) {
  return reinforce_loss(policy, layout, log_probs, advantages, std::span<const T>{}, grad_out,
                        normalizer, options);
}

// PPO clipped surrogate with clip-higher, dual clip and an optional importance
// correction against behaviour log-probs (applied to the clipped token loss, as veRL's
// truncated IS does).
template <exec::host_policy Policy, std::floating_point T>
policy_loss_result ppo_clip_loss(const Policy& policy, const token_layout& layout,
                                 std::span<const T> log_probs, std::span<const T> old_log_probs,
                                 std::span<const T> advantages,
                                 std::span<const T> behaviour_log_probs, std::span<T> grad_out,
                                 const loss_normalizer& normalizer,
                                 const ppo_clip_options& options = {}) {
  detail::validate_ppo_options(options);
  const terms::ppo_clip_params params = detail::ppo_params_of(options);
  // The token's loss and its importance-weighted form, each free of branches so that
  // the fused loss loop vectorises; `token` picks one (the checked path's term).
  const bool corrected = options.importance.mode != importance_sampling::none;
  const auto unweighted_token = [&](std::size_t t, policy_loss_metrics& m) {
    ++m.valid_tokens;
    const terms::ppo_clip_token_result r =
        terms::ppo_clip_token(static_cast<double>(log_probs[t]),
                              static_cast<double>(old_log_probs[t]),
                              static_cast<double>(advantages[t]), params);
    terms::count_clips(r, m);
    // approx_kl rides along to the drivers' canonical sum (metrics.approx_kl_sum).
    return detail::token_loss_with_kl(r);
  };
  const auto weighted_token = [&](std::size_t t, policy_loss_metrics& m) {
    return terms::importance_weighted(
        unweighted_token(t, m),
        static_cast<double>(old_log_probs[t]) - static_cast<double>(behaviour_log_probs[t]),
        options.importance, m);
  };
  const auto token = [&](std::size_t t, policy_loss_metrics& m) {
    return corrected ? weighted_token(t, m) : unweighted_token(t, m);
  };
  // approx_kl must reach the drivers' canonical sum (a token_loss would slice it off).
  static_assert(detail::carries_approx_kl<decltype(token(std::size_t{}, std::declval<policy_loss_metrics&>()))>);
  T weight{};
  if (detail::fused_loss_applies(layout, {log_probs.size(), old_log_probs.size(), advantages.size()},
                                 behaviour_log_probs, grad_out, normalizer, options.aggregation,
                                 options.importance, weight)) {
    const auto fused = detail::fused_policy_loss(
        policy, layout, grad_out, weight, options.importance, behaviour_log_probs,
        [&](std::size_t t) {
          return detail::nonfinite_at(log_probs, t) | detail::nonfinite_at(old_log_probs, t) |
                 detail::nonfinite_at(advantages, t);
        },
        unweighted_token, weighted_token);
    if (!fused.nonfinite) return {fused.total.loss, fused.total.metrics};
    // A bad input: the checks below name it as they always have.
  }
  detail::validate_token_input(policy, layout, log_probs, "log_probs");
  detail::validate_token_input(policy, layout, old_log_probs, "old_log_probs");
  detail::validate_token_input(policy, layout, advantages, "advantages");
  detail::prepare_policy_loss(policy, layout, behaviour_log_probs, grad_out, normalizer,
                              options.aggregation, options.importance);
  const auto total = detail::reduce_token_losses<policy_loss_metrics>(policy, layout, grad_out, token);
  return {total.loss, total.metrics};
}

template <exec::host_policy Policy, std::floating_point T>
policy_loss_result ppo_clip_loss(const Policy& policy, const token_layout& layout,
                                 std::span<const T> log_probs, std::span<const T> old_log_probs,
                                 std::span<const T> advantages, std::span<T> grad_out,
                                 const loss_normalizer& normalizer,
                                 const ppo_clip_options& options = {}) {
  return ppo_clip_loss(policy, layout, log_probs, old_log_probs, advantages, std::span<const T>{},
                       grad_out, normalizer, options);
}

}  // namespace cascade_rl
