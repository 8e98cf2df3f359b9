#pragma once
// Rollout correction (veRL's rollout_corr_helper.compute_rollout_correction_and_rejection_mask)
// and the bypass-mode loss built on it (veRL compute_policy_loss_bypass_mode).
//
//   rollout_correction  from the log-ratio d = logp - rollout_logp: importance weights at
//                       token or sequence level (truncated, or IcePop's band), optionally
//                       batch-normalised; the rejection criteria's verdicts as an effective
//                       mask byte per token (the layout's mask AND every criterion); and
//                       every diagnostic veRL logs under rollout_corr/.
//   bypass_mode_loss    the correction, then PPO's clipped loss (no IS weights) or
//                       REINFORCE with the IS weights, on the effective mask.
//
// Sums over tokens run in the canonical order (core/canonical_sum.hpp), sums over rows in
// the canonical order over row indices, sums within a row in index order, all in double:
// exec::seq and exec::par give the same bits.

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/rollout_correction_metrics.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/rollout_correction.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"
#include "cascade_rl/terms/rollout_correction_passes.hpp"
#include "cascade_rl/terms/rollout_correction_terms.hpp"

namespace cascade_rl {

template <std::floating_point T>
struct rollout_correction_inputs {
  std::span<const T> log_probs;          // the trainer's (veRL's old_log_prob argument)
  std::span<const T> rollout_log_probs;  // the sampler's
};

template <std::floating_point T>
struct bypass_mode_inputs {
  std::span<const T> log_probs;
  std::span<const T> rollout_log_probs;  // veRL's old_log_prob in bypass mode
  std::span<const T> advantages;
};

namespace detail {

// Tokens whose exps the host's pre-pass computes in one vectorised loop.
inline constexpr std::size_t rollout_exp_batch = 64;

inline void validate_rollout_correction_options(const rollout_correction_options& o) {
  if (o.is_level != rollout_is_level::none) {
    if (!(o.is_upper > 0 && std::isfinite(o.is_upper)))
      fail("options.is_upper",
           "is " + std::to_string(o.is_upper) + ", expected a finite value > 0");
    if (o.is_lower && !(*o.is_lower > 0 && *o.is_lower <= o.is_upper))
      fail("options.is_lower", "is " + std::to_string(*o.is_lower) +
                                   ", expected 0 < is_lower <= is_upper (" +
                                   std::to_string(o.is_upper) + ")");
  }
  if (o.rejection_count > max_rollout_rs_criteria)
    fail("options.rejection_count", "is " + std::to_string(o.rejection_count) +
                                        ", expected at most " +
                                        std::to_string(max_rollout_rs_criteria));
  for (std::size_t c = 0; c < o.rejection_count; ++c) {
    const rollout_rs_criterion& r = o.rejection[c];
    if (r.level == rollout_rs_level::seq_max && r.statistic == rollout_rs_statistic::k1)
      fail_at("options.rejection", c,
              "is seq_max_k1, which veRL does not define (seq_max "
              "takes k2 or k3)");
    if (!(r.upper > 0 && std::isfinite(r.upper)))
      fail_at("options.rejection", c,
              "has upper " + std::to_string(r.upper) + ", expected a finite value > 0");
    if (r.statistic == rollout_rs_statistic::k1 && !(r.lower > 0 && r.lower <= r.upper))
      fail_at("options.rejection", c,
              "has lower " + std::to_string(r.lower) + ", expected 0 < lower <= upper (" +
                  std::to_string(r.upper) + ")");
    for (std::size_t e = 0; e < c; ++e)
      if (o.rejection[e].level == r.level && o.rejection[e].statistic == r.statistic)
        fail_at("options.rejection", c,
                "repeats " + to_string(r) + " (criterion " + std::to_string(e) + ")");
  }
}

}  // namespace detail

// The rollout correction of one micro-batch. is_weights_out (one per token; may be empty
// when options.is_level is none) receives the applied weights, 0 on masked tokens;
// keep_out (one per token) receives 1 where the token is valid in `layout` and every
// rejection criterion keeps it (veRL's modified response mask), else 0. The metrics are
// veRL's, over the layout's valid tokens and rows (the micro-batch's local means). At
// least one token must be valid (veRL refuses an empty mask).
template <exec::host_policy Policy, std::floating_point T>
rollout_correction_metrics rollout_correction(const Policy& policy, const token_layout& layout,
                                              const rollout_correction_inputs<T>& inputs,
                                              std::span<T> is_weights_out,
                                              std::span<std::uint8_t> keep_out,
                                              const rollout_correction_options& options) {
  using namespace detail;
  validate_rollout_correction_options(options);
  const std::size_t n = layout.tokens();
  const std::size_t rows = layout.sequences();
  require_size(inputs.log_probs.size(), n, "log_probs", "one per token");
  require_size(inputs.rollout_log_probs.size(), n, "rollout_log_probs", "one per token");
  require_size(keep_out.size(), n, "keep_out", "one per token");
  const bool weighted = options.is_level != rollout_is_level::none;
  if (weighted) require_size(is_weights_out.size(), n, "is_weights_out", "one per token");
  require_finite_where_valid(policy, inputs.log_probs, layout, "log_probs");
  require_finite_where_valid(policy, inputs.rollout_log_probs, layout, "rollout_log_probs");
  const T* logp = inputs.log_probs.data();
  const T* rollout = inputs.rollout_log_probs.data();
  const std::uint8_t* mask = layout.has_mask() ? layout.mask().data() : nullptr;
  const terms::rollout_correction_params p = rollout_params_of(options);
  T* weights = weighted ? is_weights_out.data() : nullptr;

  std::vector<double> row(rollout_row_scratch(rows));
  for_each_index(
      policy, rows,
      [&](std::size_t s) {
        terms::rollout_row_prepass<rollout_exp_batch>(p, logp, rollout, mask, layout.begin(s),
                                                      layout.end(s), s, rows, row.data());
      },
      /*min_parallel=*/64);
  const auto token_pass = [&](double factor) {
    for_each_index(
        policy, rows,
        [&](std::size_t s) {
          terms::rollout_row_tokens(p, logp, rollout, mask, layout.begin(s), layout.end(s), s, rows,
                                    row.data(), factor, weights, keep_out.data(),
                                    static_cast<std::size_t*>(nullptr));
        },
        /*min_parallel=*/64);
  };
  token_pass(1.0);

  using extremes_t = std::array<double, terms::rollout_extremes>;
  extremes_t none;
  for (int c = 0; c < terms::rollout_extremes; c += 2) {
    none[c] = -std::numeric_limits<double>::infinity();
    none[c + 1] = std::numeric_limits<double>::infinity();
  }
  // Only the configured criteria's channels and extremes are kept (the others are zeros
  // and infinities: their sums are +0.0 either way): with one criterion 16 of the 76
  // channels and 4 of the 24 extremes. A chunk is walked row by row, so each row's view
  // (its sequence-level weight and statistics) is read once per row, not per token; the
  // terms land in the chunk's canonical positions, so the sums are the token order's.
  const int active = terms::rollout_active_channels(p);
  const int active_extremes = terms::rollout_active_extremes(p);
  const auto sums = chunked_blocked_sum<terms::rollout_channels>(
      policy, n, none,
      [&](extremes_t& e, std::size_t first, std::size_t last, double* out) {
        // Every token's d and exp first, in a loop of their own that vectorises (masked
        // tokens too: their values go unread).
        double d_of[sum_chunk], rho_of[sum_chunk];
        for (std::size_t t = first; t < last; ++t) {
          d_of[t - first] = static_cast<double>(logp[t]) - static_cast<double>(rollout[t]);
          rho_of[t - first] = terms::rollout_raw_weight(d_of[t - first]);
        }
        for (std::size_t s = sequence_holding(layout, first), begin = first; begin < last; ++s) {
          const std::size_t end = std::min(last, layout.end(s));
          const terms::rollout_row_view view = terms::rollout_row_view_of(p, row.data(), s, rows);
          for (std::size_t t = begin; t < end; ++t) {
            double v[terms::rollout_channels];
            double x[terms::rollout_extremes];
            if (mask != nullptr && mask[t] == 0) {
              for (int c = 0; c < active; ++c) out[c * sum_chunk + t - first] = 0.0;
              continue;
            }
            terms::rollout_valid_token_channels(
                p, terms::rollout_token_ratio_of(p, d_of[t - first], rho_of[t - first], view), view,
                v, x);
            for (int c = 0; c < active; ++c) out[c * sum_chunk + t - first] = v[c];
            terms::rollout_join_extremes(e.data(), x, active_extremes);
          }
          begin = end;
        }
      },
      [](extremes_t& total, const extremes_t& part) {
        terms::rollout_join_extremes(total.data(), part.data());
      },
      static_cast<std::size_t>(active));
  double factor = 1.0;
  rollout_correction_metrics metrics = finish_rollout_correction(
      options, p, row.data(), rows, sums.sums.data(), sums.state.data(), factor);
  if (weighted && factor != 1.0) token_pass(factor);
  return metrics;
}

// The result of bypass_mode_loss: the loss with its metrics (metrics.approx_kl is veRL's
// actor/ppo_kl over the effective mask: PPO's clamped one for ppo_clip, the plain masked
// mean of rollout_logp - logp for reinforce) and the correction's metrics.
struct bypass_mode_result {
  double loss = 0;
  policy_loss_metrics metrics{};
  rollout_correction_metrics correction{};
};

// veRL's compute_policy_loss_bypass_mode in two steps, so that a caller can count the
// effective mask's tokens (over every rank) between them:
//   1. bypass_mode_correction: rollout_correction on (log_probs, rollout_log_probs); the
//      effective mask is layout.with_mask(keep_out).
//   2. bypass_mode_policy_loss on the effective layout: ppo_clip_loss with old_log_probs =
//      rollout_log_probs and no IS weights, or reinforce_loss (options.reinforce, veRL's
//      log-prob surrogate) with the correction's IS weights as rollout_is_weights.
// bypass_mode_loss runs both. is_weights_out and keep_out hold one entry per token
// (is_weights_out may be empty when no IS level is set).
template <exec::host_policy Policy, std::floating_point T>
rollout_correction_metrics bypass_mode_correction(const Policy& policy, const token_layout& layout,
                                                  const bypass_mode_inputs<T>& inputs,
                                                  const bypass_mode_options& options,
                                                  std::span<T> is_weights_out,
                                                  std::span<std::uint8_t> keep_out) {
  if (options.ppo.importance.mode != importance_sampling::none)
    detail::fail("options.ppo.importance",
                 "must be none: the bypass mode's ratio is already the correction");
  if (options.reinforce.importance.mode != importance_sampling::none)
    detail::fail("options.reinforce.importance",
                 "must be none: the bypass mode's IS weights are the correction's");
  detail::require_size(inputs.advantages.size(), layout.tokens(), "advantages", "one per token");
  return rollout_correction(policy, layout,
                            rollout_correction_inputs<T>{inputs.log_probs, inputs.rollout_log_probs},
                            is_weights_out, keep_out, options.correction);
}

// Step 2 (see above). metrics.approx_kl is veRL's actor/ppo_kl over the effective mask:
// PPO's clamped one for ppo_clip, the plain masked mean of rollout_logp - logp for
// reinforce.
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result bypass_mode_policy_loss(const Policy& policy, const token_layout& effective,
                                           const bypass_mode_inputs<output_value_t<Out>>& inputs,
                                           std::span<const output_value_t<Out>> is_weights,
                                           Out&& grad_out, const loss_normalizer& normalizer,
                                           const bypass_mode_options& options) {
  using T = output_value_t<Out>;
  if (options.loss == bypass_loss::ppo_clip)
    return ppo_clip_loss(policy, effective,
                         ppo_clip_inputs<T>{.log_probs = inputs.log_probs,
                                            .old_log_probs = inputs.rollout_log_probs,
                                            .advantages = inputs.advantages},
                         grad_out, normalizer, options.ppo);
  const bool weighted = options.correction.is_level != rollout_is_level::none;
  policy_loss_result loss = reinforce_loss(
      policy, effective,
      reinforce_inputs<T>{.log_probs = inputs.log_probs,
                          .advantages = inputs.advantages,
                          .rollout_is_weights = weighted ? is_weights : std::span<const T>{}},
      grad_out, normalizer, options.reinforce);
  const std::span<const T> logp = inputs.log_probs;
  const std::span<const T> rollout = inputs.rollout_log_probs;
  loss.metrics.approx_kl_sum = detail::blocked_sum(policy, effective.tokens(), [&](std::size_t t) {
    return effective.valid(t) ? static_cast<double>(rollout[t]) - static_cast<double>(logp[t])
                              : 0.0;
  });
  return loss;
}

// Both steps. `normalizer` is a loss_normalizer, or a function of the effective layout
// returning one (veRL's agg_loss divides by the rejection-masked counts: pass
// [&](const token_layout& l) { return verl::single_rank_normalizer(policy, l, mode, T); }).
template <exec::host_policy Policy, contiguous_output Out, class Normalizer>
bypass_mode_result bypass_mode_loss(const Policy& policy, const token_layout& layout,
                                    const bypass_mode_inputs<output_value_t<Out>>& inputs,
                                    Out&& grad_out, const Normalizer& normalizer,
                                    const bypass_mode_options& options,
                                    std::span<output_value_t<Out>> is_weights_out,
                                    std::span<std::uint8_t> keep_out) {
  using T = output_value_t<Out>;
  bypass_mode_result result;
  result.correction =
      bypass_mode_correction(policy, layout, inputs, options, is_weights_out, keep_out);
  const token_layout effective = layout.with_mask(keep_out);
  loss_normalizer norm;
  if constexpr (std::is_same_v<Normalizer, loss_normalizer>)
    norm = normalizer;
  else
    norm = normalizer(effective);
  const policy_loss_result loss = bypass_mode_policy_loss(
      policy, effective, inputs, std::span<const T>(is_weights_out), grad_out, norm, options);
  result.loss = loss.loss;
  result.metrics = loss.metrics;
  return result;
}

}  // namespace cascade_rl
