#pragma once
// Policy-gradient losses with their gradient dL/dlogp per sampled token.
//
//   reinforce_loss  strictly on-policy REINFORCE, the GRPO of Cascade RL (one gradient
//                   step per rollout batch, so the ratio is identically 1 and PPO's
//                   clip is inert); with a band importance mask it is MOPD's loss.
//   ppo_clip_loss   PPO's clipped surrogate as in veRL compute_policy_loss_vanilla,
//                   with clip-higher (DAPO: separate low/high ranges) and dual clip
//                   (Ye et al. 2020, "Mastering Complex Control in MOBA Games").
//   cispo_loss      CISPO (MiniMax-M1): the clipped ratio as a stop-gradient weight on
//                   -A * logp, as in veRL compute_policy_loss_cispo.
//   sapo_loss       SAPO: a sigmoid gate of the ratio instead of a clip (veRL sapo).
//   dro_loss        DRO: -A * logp with a quadratic penalty on the log-ratio (veRL dro).
//   dppo_loss       DPPO-Binary-TV / -KL: the truncated ratio as that weight, tokens
//                   outside the divergence trust region dropped (veRL dppo_tv, dppo_kl).
//
// Each returns the aggregated loss (see loss_aggregation.hpp) and writes
// grad_out[t] = dL/dlogp_t for every token, 0 on masked tokens: the seed of the
// caller's backward pass. grad_out must not alias an input.

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "cascade_rl/algorithms/importance_weights.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/algorithms/policy_loss_spec.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/policy_gradient_tokens.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"
#include "cascade_rl/terms/ratio_loss_tokens.hpp"

namespace cascade_rl {

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

inline void validate_ratio_options(const cispo_options& options) {
  if (!(options.clip_low >= 0))
    fail("options.clip_low", "is " + std::to_string(options.clip_low) + ", expected >= 0");
  if (!(options.clip_high >= 0))
    fail("options.clip_high", "is " + std::to_string(options.clip_high) + ", expected >= 0");
  if (!(options.log_ratio_clamp > 0))
    fail("options.log_ratio_clamp",
         "is " + std::to_string(options.log_ratio_clamp) + ", expected > 0");
}

// SAPO's temperatures, at token or sequence level.
inline void validate_sapo_temperatures(double tau_pos, double tau_neg) {
  if (!(tau_pos > 0 && std::isfinite(tau_pos)))
    fail("options.tau_pos", "is " + std::to_string(tau_pos) + ", expected a finite value > 0");
  if (!(tau_neg > 0 && std::isfinite(tau_neg)))
    fail("options.tau_neg", "is " + std::to_string(tau_neg) + ", expected a finite value > 0");
}

inline void validate_ratio_options(const sapo_options& options) {
  validate_sapo_temperatures(options.tau_pos, options.tau_neg);
  if (!(options.log_ratio_clamp > 0))
    fail("options.log_ratio_clamp",
         "is " + std::to_string(options.log_ratio_clamp) + ", expected > 0");
}

inline void validate_ratio_options(const dro_options& options) {
  if (!(options.beta > 0 && std::isfinite(options.beta)))
    fail("options.beta", "is " + std::to_string(options.beta) +
                             ", expected a finite value > 0 (DRO's penalty has no default)");
}

inline void validate_ratio_options(const dppo_options& options) {
  if (!(options.clip_low >= 0))
    fail("options.clip_low", "is " + std::to_string(options.clip_low) + ", expected >= 0");
  if (!(options.clip_high >= 0))
    fail("options.clip_high", "is " + std::to_string(options.clip_high) + ", expected >= 0");
  if (!(options.truncation > 0))
    fail("options.truncation", "is " + std::to_string(options.truncation) + ", expected > 0");
  if (!(options.log_ratio_clamp > 0))
    fail("options.log_ratio_clamp",
         "is " + std::to_string(options.log_ratio_clamp) + ", expected > 0");
}

template <class Policy, std::floating_point T>
void validate_token_input(const Policy& policy, const token_layout& layout,
                          std::span<const T> values, std::string_view argument) {
  require_size(values.size(), layout.tokens(), argument, "one per token");
  require_finite_where_valid(policy, values, layout, argument);
}

// The inputs of a loss whose pre-pass reads every token of a row (the sequence and
// selection losses), checked before it in the order the token pass and the device name
// them: log_probs, old_log_probs, advantages, then the rollout IS weights when given.
template <class Policy, std::floating_point T>
void validate_ratio_token_inputs(const Policy& policy, const token_layout& layout,
                                 const policy_ratio_inputs<T>& inputs) {
  validate_token_input(policy, layout, inputs.log_probs, "log_probs");
  validate_token_input(policy, layout, inputs.old_log_probs, "old_log_probs");
  validate_token_input(policy, layout, inputs.advantages, "advantages");
  if (!inputs.rollout_is_weights.empty())
    validate_token_input(policy, layout, inputs.rollout_is_weights, "rollout_is_weights");
}

// A per-token input of a policy loss and the name its errors give it.
template <std::floating_point T>
struct token_input {
  std::span<const T> values;
  const char* name;
};

// A loss without an importance correction (the ratio, sequence and selection losses).
struct no_correction {};

// The importance correction of REINFORCE and PPO: each token's loss weighted by the
// ratio of `ratio_target` (the log-probs the correction aims at) over the behaviour
// log-probs, as `importance` says (its mode none: no correction).
template <std::floating_point T>
struct importance_correction {
  std::span<const T> ratio_target;
  std::span<const T> behaviour_log_probs;
  const importance_options& importance;
};

// One pass of a policy loss: sizes checked up front, then checked_token_losses (one
// token pass, finiteness riding along; else the checks that name the first bad input,
// in the order they always have: the inputs, rollout_is_weights, behaviour_log_probs,
// grad_out, the normaliser).
template <class Policy, std::floating_point T, std::size_t N, class Nonfinite, class Term>
policy_loss_result policy_loss_pass(const Policy& policy, const token_layout& layout,
                                    const std::array<token_input<T>, N>& inputs,
                                    std::span<const T> given_weights,
                                    std::span<const T> behaviour_log_probs,
                                    const importance_options& importance, std::span<T> grad_out,
                                    const loss_normalizer& normalizer, loss_aggregation aggregation,
                                    const Nonfinite& nonfinite, const Term& term) {
  const std::size_t n = layout.tokens();
  bool sizes_ok = grad_out.size() == n && (given_weights.empty() || given_weights.size() == n) &&
                  (importance.mode == importance_sampling::none
                       ? behaviour_log_probs.empty() || behaviour_log_probs.size() == n
                       : behaviour_log_probs.size() == n);
  for (const token_input<T>& input : inputs) sizes_ok = sizes_ok && input.values.size() == n;
  const auto total = checked_token_losses<policy_loss_metrics>(
      policy, layout, grad_out, normalizer, aggregation, sizes_ok,
      [&] {
        for (const token_input<T>& input : inputs)
          validate_token_input(policy, layout, input.values, input.name);
        if (!given_weights.empty())
          validate_token_input(policy, layout, given_weights, "rollout_is_weights");
        validate_behaviour(policy, layout, behaviour_log_probs, importance);
        require_size(grad_out.size(), n, "grad_out", "one per token");
        validate_normalizer(policy, layout, normalizer, aggregation);
      },
      nonfinite, term);
  return {total.loss, total.metrics};
}

// The passes every policy loss shares. `unweighted(t, metrics)` is the token's loss
// (or unweighted(t, metrics, s), s the token's sequence, for a loss with per-sequence
// values);
// `given_weights` (veRL's rollout_is_weights; empty: none) scale it when present, and
// with an importance_correction whose mode is not none the term is then
// importance-weighted, the behaviour log-probs' finiteness checked too. Each combination
// is its own instantiation, so that every token loop is free of branches and
// vectorises; a loss without a correction instantiates none of its branches.
template <class Policy, std::floating_point T, std::size_t N, class Correction, class Nonfinite,
          class Unweighted>
policy_loss_result policy_loss_passes(const Policy& policy, const token_layout& layout,
                                      const std::array<token_input<T>, N>& inputs,
                                      std::span<const T> given_weights,
                                      const Correction& correction, std::span<T> grad_out,
                                      const loss_normalizer& normalizer,
                                      loss_aggregation aggregation, const Nonfinite& nonfinite,
                                      const Unweighted& unweighted) {
  const importance_options uncorrected{};
  const auto pass = [&](std::span<const T> behaviour, const importance_options& importance,
                        const auto& nonfinite_of, const auto& term) {
    return policy_loss_pass(policy, layout, inputs, given_weights, behaviour, importance, grad_out,
                            normalizer, aggregation, nonfinite_of, term);
  };
  // The wrappers pass a term's sequence index on when it takes one (loss_aggregation.hpp,
  // reads_sequence); the trailing return types keep them callable only as the term is.
  const auto given = [&](std::size_t t, policy_loss_metrics& m, auto... s) CASCADE_RL_ALWAYS_INLINE
      -> decltype(terms::given_weighted(unweighted(t, m, s...), 0.0)) {
    return terms::given_weighted(unweighted(t, m, s...), static_cast<double>(given_weights[t]));
  };
  const auto given_nonfinite = [&](std::size_t t) {
    return nonfinite(t) | nonfinite_at(given_weights, t);
  };
  const auto uncorrected_pass = [&](std::span<const T> behaviour) {
    return given_weights.empty() ? pass(behaviour, uncorrected, nonfinite, unweighted)
                                 : pass(behaviour, uncorrected, given_nonfinite, given);
  };
  if constexpr (std::is_same_v<Correction, no_correction>) {
    return uncorrected_pass(std::span<const T>{});
  } else {
    const std::span<const T> ratio_target = correction.ratio_target;
    const std::span<const T> behaviour = correction.behaviour_log_probs;
    const importance_options& importance = correction.importance;
    if (importance.mode == importance_sampling::none) return uncorrected_pass(behaviour);
    const auto corrected = [&](const auto& inner_nonfinite, const auto& inner) {
      return pass(
          behaviour, importance,
          [&](std::size_t t) { return inner_nonfinite(t) | nonfinite_at(behaviour, t); },
          [&](std::size_t t, policy_loss_metrics& m, auto... s) CASCADE_RL_ALWAYS_INLINE
          -> decltype(terms::importance_weighted(inner(t, m, s...), 0.0, importance, m)) {
            return terms::importance_weighted(
                inner(t, m, s...),
                static_cast<double>(ratio_target[t]) - static_cast<double>(behaviour[t]),
                importance, m);
          });
    };
    return given_weights.empty() ? corrected(nonfinite, unweighted)
                                 : corrected(given_nonfinite, given);
  }
}

// A token formula of a loss that reads log_probs, old_log_probs and advantages (every loss
// of the ratio to the old policy), in one of three forms, as the device's ratio_term takes
// them: formula(logp, old_logp, A) (terms/ratio_loss_tokens.hpp); formula(t, logp,
// old_logp, A) when it reads a value of token t (a selection byte); formula(of_sequence{s},
// logp, old_logp, A) when it reads a value of t's sequence s (a pre-pass's: the token pass
// hands s over, no search). It returns the token's loss, d/dlogp, approx_kl and its clips
// where it has any.
struct of_sequence {
  std::size_t index;
};

// The token pass of such a loss: the formula on every valid token, its clips counted,
// its loss scaled by given_weights when given (GMPO passes none: its row loss holds them),
// the three inputs' finiteness riding along. No behaviour log-probs, no importance option.
template <class Policy, std::floating_point T, class Formula>
policy_loss_result old_policy_passes(const Policy& policy, const token_layout& layout,
                                     const policy_ratio_inputs<T>& inputs,
                                     std::span<const T> given_weights, std::span<T> grad_out,
                                     const loss_normalizer& normalizer,
                                     loss_aggregation aggregation, const Formula& formula) {
  const std::span<const T> log_probs = inputs.log_probs;
  const std::span<const T> old_log_probs = inputs.old_log_probs;
  const std::span<const T> advantages = inputs.advantages;
  const auto counted = [](policy_loss_metrics& m, const auto& r) CASCADE_RL_ALWAYS_INLINE {
    ++m.valid_tokens;
    terms::count_clips_if_any(r, m);
    return token_loss_with_kl(r);
  };
  const auto passes = [&](const auto& unweighted) {
    return policy_loss_passes(
        policy, layout,
        std::array{token_input<T>{log_probs, "log_probs"},
                   token_input<T>{old_log_probs, "old_log_probs"},
                   token_input<T>{advantages, "advantages"}},
        given_weights, no_correction{}, grad_out, normalizer, aggregation,
        [&](std::size_t t) {
          return nonfinite_at(log_probs, t) | nonfinite_at(old_log_probs, t) |
                 nonfinite_at(advantages, t);
        },
        unweighted);
  };
  // Always inlined, every layer: GCC 12 otherwise calls SAPO's and DPPO's formula out of
  // line (two or three exps make it too big for its own inliner), and their token loops
  // stay scalar, 7 to 11 times slower at 1M tokens.
  if constexpr (std::is_invocable_v<const Formula&, of_sequence, double, double, double>)
    return passes([&](std::size_t t, policy_loss_metrics& m, std::size_t s) CASCADE_RL_ALWAYS_INLINE {
      return counted(m, formula(of_sequence{s}, static_cast<double>(log_probs[t]),
                                static_cast<double>(old_log_probs[t]),
                                static_cast<double>(advantages[t])));
    });
  else if constexpr (std::is_invocable_v<const Formula&, std::size_t, double, double, double>)
    return passes([&](std::size_t t, policy_loss_metrics& m) CASCADE_RL_ALWAYS_INLINE {
      return counted(m, formula(t, static_cast<double>(log_probs[t]),
                                static_cast<double>(old_log_probs[t]),
                                static_cast<double>(advantages[t])));
    });
  else
    return passes([&](std::size_t t, policy_loss_metrics& m) CASCADE_RL_ALWAYS_INLINE {
      return counted(m, formula(static_cast<double>(log_probs[t]),
                                static_cast<double>(old_log_probs[t]),
                                static_cast<double>(advantages[t])));
    });
}

}  // namespace detail

// The token-local ratio losses (CISPO, DPPO, DRO, SAPO) in one driver, the loss picked by
// the options' type: its token function (visit_ratio_token), scaled by
// inputs.rollout_is_weights when given. cispo_loss, dppo_loss, dro_loss and sapo_loss below
// are its names per loss.
template <exec::host_policy Policy, contiguous_output Out, detail::token_ratio_options Options>
policy_loss_result policy_ratio_loss(const Policy& policy, const token_layout& layout,
                                     const policy_ratio_inputs<output_value_t<Out>>& inputs,
                                     Out&& grad_out, const loss_normalizer& normalizer,
                                     const Options& options) {
  detail::validate_ratio_options(options);
  return detail::visit_ratio_token(options, [&](const auto& token) {
    return detail::old_policy_passes(policy, layout, inputs, inputs.rollout_is_weights,
                                     output_span(grad_out), normalizer, options.aggregation,
                                     token);
  });
}

// Strictly on-policy REINFORCE: l_t = -w_t * A_t * ratio_t with ratio_t =
// exp(logp_t - stopgrad(logp_t)) == 1, so dl_t/dlogp_t = -w_t * A_t; no old log-probs.
// inputs.behaviour_log_probs (the sampler's) are read only when options.importance asks;
// inputs.rollout_is_weights, when given, scale each token's loss first. With the log-prob
// surrogate this is veRL's GPG (compute_policy_loss_gpg) and compute_policy_loss_reinforce.
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result reinforce_loss(const Policy& policy, const token_layout& layout,
                                  const reinforce_inputs<output_value_t<Out>>& inputs,
                                  Out&& grad_out, const loss_normalizer& normalizer,
                                  const reinforce_options& options = {}) {
  using T = output_value_t<Out>;
  detail::validate_importance(options.importance, "options.importance");
  const std::span<const T> log_probs = inputs.log_probs;
  const std::span<const T> advantages = inputs.advantages;
  const bool log_prob_surrogate = options.surrogate == reinforce_surrogate::log_prob;
  const auto unweighted = [&](std::size_t t, policy_loss_metrics& m) CASCADE_RL_ALWAYS_INLINE {
    ++m.valid_tokens;
    return terms::reinforce_token(static_cast<double>(log_probs[t]),
                                  static_cast<double>(advantages[t]), log_prob_surrogate);
  };
  // The correction's ratio is the trainer's own log-probs over the behaviour's.
  return detail::policy_loss_passes(
      policy, layout,
      std::array{detail::token_input<T>{log_probs, "log_probs"},
                 detail::token_input<T>{advantages, "advantages"}},
      inputs.rollout_is_weights,
      detail::importance_correction<T>{log_probs, inputs.behaviour_log_probs, options.importance},
      output_span(grad_out), normalizer, options.aggregation,
      [&](std::size_t t) {
        return detail::nonfinite_at(log_probs, t) | detail::nonfinite_at(advantages, t);
      },
      unweighted);
}

// PPO clipped surrogate with clip-higher, dual clip and an optional importance
// correction against inputs.behaviour_log_probs (applied to the clipped token loss, as
// veRL's truncated IS does). inputs.rollout_is_weights, when given, scale each token's
// clipped loss first (veRL's vanilla rollout_is_weights, NeMo-RL's precomputed actor
// importance weights: a stop-gradient factor, value and gradient alike).
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result ppo_clip_loss(const Policy& policy, const token_layout& layout,
                                 const ppo_clip_inputs<output_value_t<Out>>& inputs, Out&& grad_out,
                                 const loss_normalizer& normalizer,
                                 const ppo_clip_options& options = {}) {
  using T = output_value_t<Out>;
  detail::validate_ppo_options(options);
  const terms::ppo_clip_params params = detail::ppo_params_of(options);
  const std::span<const T> log_probs = inputs.log_probs;
  const std::span<const T> old_log_probs = inputs.old_log_probs;
  const std::span<const T> advantages = inputs.advantages;
  const auto unweighted = [&](std::size_t t, policy_loss_metrics& m) {
    ++m.valid_tokens;
    const terms::ppo_clip_token_result r =
        terms::ppo_clip_token(static_cast<double>(log_probs[t]),
                              static_cast<double>(old_log_probs[t]),
                              static_cast<double>(advantages[t]), params);
    terms::count_clips(r, m);
    // approx_kl rides along to the drivers' canonical sum (metrics.approx_kl_sum).
    return detail::token_loss_with_kl(r);
  };
  // approx_kl must reach the drivers' canonical sum (a token_loss would slice it off;
  // importance_weighted keeps the type it is given).
  static_assert(detail::carries_approx_kl<decltype(unweighted(std::size_t{}, std::declval<policy_loss_metrics&>()))>);
  // The correction's ratio is the old log-probs over the behaviour's (veRL's TIS).
  return detail::policy_loss_passes(
      policy, layout,
      std::array{detail::token_input<T>{log_probs, "log_probs"},
                 detail::token_input<T>{old_log_probs, "old_log_probs"},
                 detail::token_input<T>{advantages, "advantages"}},
      inputs.rollout_is_weights,
      detail::importance_correction<T>{old_log_probs, inputs.behaviour_log_probs, options.importance},
      output_span(grad_out), normalizer, options.aggregation,
      [&](std::size_t t) {
        return detail::nonfinite_at(log_probs, t) | detail::nonfinite_at(old_log_probs, t) |
               detail::nonfinite_at(advantages, t);
      },
      unweighted);
}

// CISPO: l_t = -sg(clamp(r_t, 1 - clip_low, 1 + clip_high)) * A_t * logp_t with r_t =
// exp(clamp(logp_t - old_logp_t, +-log_ratio_clamp)), times inputs.rollout_is_weights
// when given; dl_t/dlogp_t is the factor before logp_t, whatever the clip. metrics.clipped
// counts the tokens whose ratio the clip moved (veRL's pg_clipfrac), approx_kl is PPO's.
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result cispo_loss(const Policy& policy, const token_layout& layout,
                              const policy_ratio_inputs<output_value_t<Out>>& inputs,
                              Out&& grad_out, const loss_normalizer& normalizer,
                              const cispo_options& options = {}) {
  return policy_ratio_loss(policy, layout, inputs, grad_out, normalizer, options);
}

// DPPO-Binary-TV (options.divergence total_variation) or -KL (binary_kl):
// l_t = -A_t * sg(min(r_t, truncation)) * logp_t * m_t, r_t = exp(clamp(logp_t - old_logp_t,
// +-log_ratio_clamp)), m_t the trust-region mask (see dppo_options), times
// inputs.rollout_is_weights when given; dl_t/dlogp_t = -A_t * min(r_t, c) * m_t.
// metrics.clipped counts masked-out tokens (veRL's pg_clipfrac), metrics.dual_clipped
// kept tokens whose ratio was truncated (veRL's pg_clipfrac_lower), approx_kl is PPO's.
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result dppo_loss(const Policy& policy, const token_layout& layout,
                             const policy_ratio_inputs<output_value_t<Out>>& inputs, Out&& grad_out,
                             const loss_normalizer& normalizer, const dppo_options& options = {}) {
  return policy_ratio_loss(policy, layout, inputs, grad_out, normalizer, options);
}

// DRO: l_t = -(logp_t * A_t - beta/2 * (logp_t - old_logp_t)^2), times
// inputs.rollout_is_weights when given; dl_t/dlogp_t = -A_t + beta * (logp_t - old_logp_t).
// No clamp: the penalty grows with the log-ratio. approx_kl is old_logp - logp unclamped.
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result dro_loss(const Policy& policy, const token_layout& layout,
                            const policy_ratio_inputs<output_value_t<Out>>& inputs, Out&& grad_out,
                            const loss_normalizer& normalizer, const dro_options& options) {
  return policy_ratio_loss(policy, layout, inputs, grad_out, normalizer, options);
}

// SAPO: l_t = -A_t * sigmoid(tau_t (r_t - 1)) * 4 / tau_t with r_t = exp(clamp(logp_t -
// old_logp_t, +-log_ratio_clamp)) and tau_t = tau_pos for A_t > 0, tau_neg otherwise,
// times inputs.rollout_is_weights when given; its derivative through r_t (0 under the
// clamp). Aggregated by options.aggregation over the normaliser, like every loss (veRL
// fixes seq-mean-token-mean: presets::verl::sapo). approx_kl is PPO's.
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result sapo_loss(const Policy& policy, const token_layout& layout,
                             const policy_ratio_inputs<output_value_t<Out>>& inputs, Out&& grad_out,
                             const loss_normalizer& normalizer, const sapo_options& options = {}) {
  return policy_ratio_loss(policy, layout, inputs, grad_out, normalizer, options);
}

// ---- the specs (policy_loss_spec.hpp) --------------------------------------------------

template <>
struct policy_loss_spec<reinforce_options> {
  static constexpr selection_use selection = selection_use::none;
  static void validate(const reinforce_options& o) {
    detail::validate_importance(o.importance, "options.importance");
  }
  template <class Policy, class Layout, std::floating_point T>
  static policy_loss_result run(const Policy& policy, const Layout& layout,
                                const policy_loss_inputs<T>& in, std::span<T> grad_out,
                                const loss_normalizer& normalizer, const reinforce_options& o) {
    return reinforce_loss(policy, layout,
                          reinforce_inputs<T>{.log_probs = in.log_probs,
                                              .advantages = in.advantages,
                                              .behaviour_log_probs = in.behaviour_log_probs,
                                              .rollout_is_weights = in.rollout_is_weights},
                          grad_out, normalizer, o);
  }
};

template <>
struct policy_loss_spec<ppo_clip_options> {
  static constexpr selection_use selection = selection_use::none;
  static void validate(const ppo_clip_options& o) { detail::validate_ppo_options(o); }
  template <class Policy, class Layout, std::floating_point T>
  static policy_loss_result run(const Policy& policy, const Layout& layout,
                                const policy_loss_inputs<T>& in, std::span<T> grad_out,
                                const loss_normalizer& normalizer, const ppo_clip_options& o) {
    return ppo_clip_loss(policy, layout,
                         ppo_clip_inputs<T>{.log_probs = in.log_probs,
                                            .old_log_probs = in.old_log_probs,
                                            .advantages = in.advantages,
                                            .behaviour_log_probs = in.behaviour_log_probs,
                                            .rollout_is_weights = in.rollout_is_weights},
                         grad_out, normalizer, o);
  }
};

// CISPO, DPPO, DRO and SAPO: one spec, one driver per executor (policy_ratio_loss).
template <detail::token_ratio_options Options>
struct policy_loss_spec<Options> {
  static constexpr selection_use selection = selection_use::none;
  static void validate(const Options& o) { detail::validate_ratio_options(o); }
  template <class Policy, class Layout, std::floating_point T>
  static policy_loss_result run(const Policy& policy, const Layout& layout,
                                const policy_loss_inputs<T>& in, std::span<T> grad_out,
                                const loss_normalizer& normalizer, const Options& o) {
    return policy_ratio_loss(policy, layout, detail::ratio_inputs_of(in), grad_out, normalizer, o);
  }
};

}  // namespace cascade_rl
