#pragma once
// The sequence-level ratio losses: a pre-pass computes a quantity per sequence, then a
// token pass whose loss and gradient are local given it.
//
//   gspo_loss  GSPO (Group Sequence Policy Optimization, arXiv 2507.18071) as in veRL
//              compute_policy_loss_gspo: PPO's clip on the sequence's ratio
//              s = exp(min(mean log-ratio, bound)), its mean a stop-gradient.
//   geo_mean_loss  GMPO (Geometric-Mean Policy Optimization, arXiv 2507.20673) as in veRL
//              compute_policy_loss_geo_mean: each sequence's loss -mean(A) times the
//              geometric mean of its clipped token ratios; the gradient flows through
//              the mean to every token the clip does not hold.
//   sequence_sapo_loss  SAPO at sequence level as TRL's GRPOTrainer (loss_type "sapo",
//              importance_sampling_level "sequence"): SAPO's gate of the row's ratio; the
//              ratio is not a stop-gradient, so the row's summed derivative reaches each
//              of its tokens.
//
// Each returns the aggregated loss (see loss_aggregation.hpp) and writes
// grad_out[t] = dL/dlogp_t for every token, 0 on masked tokens. grad_out must not alias
// an input.

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/policy_loss_spec.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"
#include "cascade_rl/terms/sequence_ratio_tokens.hpp"

namespace cascade_rl {

namespace detail {

inline void validate_gspo_options(const gspo_options& options) {
  if (!(options.clip_low >= 0 && options.clip_low < 1))
    fail("options.clip_low", "is " + std::to_string(options.clip_low) +
                                 ", expected 0 <= clip_low < 1 (the ratio floor 1 - clip_low "
                                 "must stay positive)");
  if (!(options.clip_high >= 0))
    fail("options.clip_high", "is " + std::to_string(options.clip_high) + ", expected >= 0");
  if (!std::isfinite(options.log_ratio_bound))
    fail("options.log_ratio_bound",
         "is " + std::to_string(options.log_ratio_bound) + ", expected a finite number");
}

// The pre-pass: each sequence's mean log-ratio (terms::sequence_mean_log_ratio), one per
// sequence; the token pass reads it by the token's sequence (its term takes s). The sizes
// of log_probs and old_log_probs must be checked before.
template <class Policy, std::floating_point T>
std::vector<double> sequence_log_ratios(const Policy& policy, const token_layout& layout,
                                        std::span<const T> log_probs,
                                        std::span<const T> old_log_probs) {
  std::vector<double> out(layout.sequences());
  const std::uint8_t* mask = layout.has_mask() ? layout.mask().data() : nullptr;
  for_each_index(
      policy, layout.sequences(),
      [&](std::size_t s) {
        out[s] = terms::sequence_mean_log_ratio(log_probs.data(), old_log_probs.data(), mask,
                                                layout.begin(s), layout.end(s));
      },
      /*min_parallel=*/64);
  return out;
}

}  // namespace detail

// GSPO: l_t = max(-A_t s, -A_t clamp(s, 1 - clip_low, 1 + clip_high)) with s = exp(min(m,
// log_ratio_bound)), m the mean of logp - old_logp over the sequence's valid tokens
// (a stop-gradient; log s_t = logp_t - sg(logp_t) + sg(m), so ds/dlogp_t = s), times
// inputs.rollout_is_weights when given; dl_t/dlogp_t = -A_t s where the unclipped branch
// is taken below the bound, else 0. Aggregated by options.aggregation over the
// normaliser, like every loss (veRL fixes seq-mean-token-mean: presets::verl::gspo).
// metrics.clipped counts l2 > l1 (veRL's pg_clipfrac); approx_kl is old_logp - logp
// unclamped (veRL's ppo_kl); dual_clipped stays 0 (veRL's pg_clipfrac_lower is 0).
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result gspo_loss(const Policy& policy, const token_layout& layout,
                             const policy_ratio_inputs<output_value_t<Out>>& inputs, Out&& grad_out,
                             const loss_normalizer& normalizer, const gspo_options& options = {}) {
  using T = output_value_t<Out>;
  detail::validate_gspo_options(options);
  const std::span<const T> log_probs = inputs.log_probs;
  const std::span<const T> old_log_probs = inputs.old_log_probs;
  detail::require_size(log_probs.size(), layout.tokens(), "log_probs", "one per token");
  detail::require_size(old_log_probs.size(), layout.tokens(), "old_log_probs", "one per token");
  const std::vector<double> sequence_log_ratio =
      detail::sequence_log_ratios(policy, layout, log_probs, old_log_probs);
  const gspo_options params = options;  // a local copy: stores to grad_out cannot alias it
  return detail::old_policy_passes(
      policy, layout, inputs, inputs.rollout_is_weights, output_span(grad_out), normalizer,
      options.aggregation,
      [&](detail::of_sequence s, double logp, double old_logp,
          double advantage) CASCADE_RL_ALWAYS_INLINE {
        return terms::gspo_token(sequence_log_ratio[s.index], logp, old_logp, advantage, params);
      });
}

namespace detail {

// `weights`: the size of the rollout_is_weights given (the spec validates the options
// alone: none).
inline void validate_sequence_sapo(const sequence_sapo_options& options,
                                   std::size_t weights = 0) {
  validate_sapo_temperatures(options.tau_pos, options.tau_neg);
  if (weights != 0)
    fail("inputs.rollout_is_weights",
         "holds " + std::to_string(weights) +
             " weights, but sequence_sapo takes none: its gradient is the row's summed "
             "derivative, which a per-token weight would break (scale the advantages instead)");
}

inline void validate_geo_mean_options(const geo_mean_options& options) {
  if (!(options.clip_low >= 0))
    fail("options.clip_low", "is " + std::to_string(options.clip_low) + ", expected >= 0");
  if (!(options.clip_high >= 0))
    fail("options.clip_high", "is " + std::to_string(options.clip_high) + ", expected >= 0");
}

}  // namespace detail

// GMPO: l_i = -mean_i(A) exp(mean_i(k_t)) [exp(mean_i(log(w_t + 1e-10)))] over sequence i's
// valid tokens, k_t = logp_t - old_logp_t clipped to clip_high from above where A_t > 0 and
// to -clip_low from below where A_t < 0 (0 where A_t = 0), w_t = inputs.rollout_is_weights
// (their geometric mean, veRL's sequence weight; empty: none). Every valid token carries
// l_i, aggregated by options.aggregation over the normaliser, so dL/dlogp_t = c_t l_i where
// the clip does not hold k_t (0 where it does): the derivative through the mean, whose 1/n
// the row's n token weights cancel. veRL takes the plain mean of l_i over all N rows:
// presets::verl::geo_mean() with verl::geo_mean_normalizer(layout). metrics.clipped counts
// A > 0 tokens beyond either bound (veRL's pg_clipfrac), dual_clipped A < 0 ones
// (pg_clipfrac_lower); approx_kl is old_logp - logp unclamped (ppo_kl).
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result geo_mean_loss(const Policy& policy, const token_layout& layout,
                                 const policy_ratio_inputs<output_value_t<Out>>& inputs,
                                 Out&& grad_out, const loss_normalizer& normalizer,
                                 const geo_mean_options& options = {}) {
  using T = output_value_t<Out>;
  detail::validate_geo_mean_options(options);
  const std::span<const T> log_probs = inputs.log_probs;
  const std::span<const T> old_log_probs = inputs.old_log_probs;
  const std::span<const T> advantages = inputs.advantages;
  const std::span<const T> weights = inputs.rollout_is_weights;
  detail::validate_ratio_token_inputs(policy, layout, inputs);  // the pre-pass reads them all
  const geo_mean_options params = options;  // a local copy, as in gspo_loss
  const std::uint8_t* mask = layout.has_mask() ? layout.mask().data() : nullptr;
  // One loss per sequence; the token pass reads it by the token's sequence. The pre-pass
  // takes 64 tokens at a time (their clipped log-ratios in a vectorised loop; the row's
  // sums in index order, the device's bits).
  std::vector<double> sequence_loss(layout.sequences());
  detail::for_each_index(
      policy, layout.sequences(),
      [&](std::size_t s) {
        sequence_loss[s] = terms::geo_mean_sequence_loss<64>(
            log_probs.data(), old_log_probs.data(), advantages.data(),
            weights.empty() ? static_cast<const T*>(nullptr) : weights.data(), mask,
            layout.begin(s), layout.end(s), params);
      },
      /*min_parallel=*/64);
  // The weights are in the row's loss already (their geometric mean), not a token factor.
  return detail::old_policy_passes(
      policy, layout, inputs, std::span<const T>{}, output_span(grad_out), normalizer,
      options.aggregation,
      [&](detail::of_sequence s, double logp, double old_logp,
          double advantage) CASCADE_RL_ALWAYS_INLINE {
        return terms::geo_mean_token(sequence_loss[s.index], logp, old_logp, advantage, params);
      });
}

// SAPO at sequence level (TRL's loss_type "sapo", importance_sampling_level "sequence"):
// l_t = -A_t g(s) with s = exp(m), m the mean of logp - old_logp over the row's valid
// tokens, g(s) = sigmoid(tau_t (s - 1)) 4 / tau_t, tau_t = tau_pos for A_t > 0, tau_neg
// otherwise; no clamp. Aggregated by options.aggregation over the normaliser (TRL's sapo
// aggregates as its grpo: presets::trl). s depends on every token of the row (ds/dlogp_t =
// s / n), so dL/dlogp_t = c (sum over the row of -A_u g'(s)) s / n, the same on each
// valid token of the row: exact because every aggregation weight c is constant along a
// row. Per-token rollout_is_weights would break that sum and are refused. approx_kl is
// old_logp - logp; no clip is counted.
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result sequence_sapo_loss(const Policy& policy, const token_layout& layout,
                                      const policy_ratio_inputs<output_value_t<Out>>& inputs,
                                      Out&& grad_out, const loss_normalizer& normalizer,
                                      const sequence_sapo_options& options = {}) {
  using T = output_value_t<Out>;
  detail::validate_sequence_sapo(options, inputs.rollout_is_weights.size());
  const std::span<const T> log_probs = inputs.log_probs;
  const std::span<const T> old_log_probs = inputs.old_log_probs;
  const std::span<const T> advantages = inputs.advantages;
  detail::validate_ratio_token_inputs(policy, layout, inputs);  // the pre-pass reads them all
  const sequence_sapo_options params = options;  // a local copy, as in gspo_loss
  const std::uint8_t* mask = layout.has_mask() ? layout.mask().data() : nullptr;
  std::vector<terms::sequence_sapo_row> rows(layout.sequences());
  detail::for_each_index(
      policy, layout.sequences(),
      [&](std::size_t s) {
        rows[s] = terms::sequence_sapo_row_of(log_probs.data(), old_log_probs.data(),
                                              advantages.data(), mask, layout.begin(s),
                                              layout.end(s), params);
      },
      /*min_parallel=*/64);
  return detail::old_policy_passes(
      policy, layout, inputs, std::span<const T>{}, output_span(grad_out), normalizer,
      options.aggregation,
      [&](detail::of_sequence s, double logp, double old_logp,
          double advantage) CASCADE_RL_ALWAYS_INLINE {
        return terms::sequence_sapo_token(rows[s.index], logp, old_logp, advantage, params);
      });
}

// ---- the specs (policy_loss_spec.hpp) --------------------------------------------------

template <>
struct policy_loss_spec<gspo_options> {
  static constexpr selection_use selection = selection_use::none;
  static void validate(const gspo_options& o) { detail::validate_gspo_options(o); }
  template <class Policy, class Layout, std::floating_point T>
  static policy_loss_result run(const Policy& policy, const Layout& layout,
                                const policy_loss_inputs<T>& in, std::span<T> grad_out,
                                const loss_normalizer& normalizer, const gspo_options& o) {
    return gspo_loss(policy, layout, detail::ratio_inputs_of(in), grad_out, normalizer, o);
  }
};

template <>
struct policy_loss_spec<geo_mean_options> {
  static constexpr selection_use selection = selection_use::none;
  static void validate(const geo_mean_options& o) { detail::validate_geo_mean_options(o); }
  template <class Policy, class Layout, std::floating_point T>
  static policy_loss_result run(const Policy& policy, const Layout& layout,
                                const policy_loss_inputs<T>& in, std::span<T> grad_out,
                                const loss_normalizer& normalizer, const geo_mean_options& o) {
    return geo_mean_loss(policy, layout, detail::ratio_inputs_of(in), grad_out, normalizer, o);
  }
};

template <>
struct policy_loss_spec<sequence_sapo_options> {
  static constexpr selection_use selection = selection_use::none;
  static void validate(const sequence_sapo_options& o) { detail::validate_sequence_sapo(o); }
  template <class Policy, class Layout, std::floating_point T>
  static policy_loss_result run(const Policy& policy, const Layout& layout,
                                const policy_loss_inputs<T>& in, std::span<T> grad_out,
                                const loss_normalizer& normalizer, const sequence_sapo_options& o) {
    return sequence_sapo_loss(policy, layout, detail::ratio_inputs_of(in), grad_out, normalizer,
                              o);
  }
};

}  // namespace cascade_rl
