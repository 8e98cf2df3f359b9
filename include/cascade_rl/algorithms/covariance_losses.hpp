#pragma once
// veRL's covariance-selection policy losses (Cui et al. 2025, "The Entropy Mechanism of
// Reinforcement Learning for Reasoning Language Models"):
//
//   clip_cov_loss   Clip-Cov, veRL compute_policy_loss_clip_cov: PPO's clipped surrogate
//                   (no dual clip, no log-ratio clamp) with the gradient stopped on a few
//                   tokens drawn at random among those of high covariance.
//   kl_cov_loss     KL-Cov, veRL compute_policy_loss_kl_cov: the unclipped surrogate -A r
//                   plus ppo_kl_coef |logp - old_logp| on the tokens of largest covariance.
//
// The covariance of token t is cov_t = (A_t - mean A) * (logp_t - mean logp) over the
// valid tokens of the batch given to the call (terms/covariance_tokens.hpp): the means
// are the canonical sums (core/canonical_sum.hpp) over the valid count, the same bits on
// every executor.
//
// Selection. A call takes a token_selection, either
//   - token_selection::replay(tokens): exactly these flat token indices, each a valid
//     token, none repeated (to replay veRL's own torch.randperm draw, which no other
//     generator reproduces); taken as given, not checked against the candidates; or
//   - token_selection::seeded(seed): OUR deterministic draw. The candidates are the
//     valid tokens where PPO's clip is inactive and clip_cov_lb < cov_t < clip_cov_ub;
//     clip_num = max(floor(clip_cov_ratio * valid tokens), 1) as veRL; when there are
//     more candidates than clip_num, those with the smallest (key, index) are selected,
//     key = terms::selection_key(seed, t), the (t + 1)-th output of SplitMix64 started at
//     seed. It depends on (seed, t, the inputs) alone, so every executor (host seq / par,
//     the Thrust path, the CUDA kernels) selects the same tokens. It is not veRL's draw.
// KL-Cov's own selection is deterministic (kl_cov_selection): the k = max(floor(
// kl_cov_ratio * valid), 1) valid tokens of largest SIGNED cov (veRL's torch.topk), none
// when no token is valid. Among equal cov (+0 and -0 equal) the smaller index goes first,
// the order of a stable descending sort; torch.topk leaves the order of ties unspecified,
// so where the k-th and (k+1)-th cov tie veRL may pick another of them: replay its
// tokens (token_selection::replay) to reproduce it exactly.
// `selected_out`, when not empty, receives the selected tokens in increasing index order
// (metrics.clipped of them; it must hold that many), so a caller can log or replay them.
//
// The selection is over the tokens one call is given: the means, clip_num and the draw
// change when a batch is split into micro-batches (veRL selects per micro-batch too), so
// the loss is NOT partition-invariant, unlike the other losses. Given one fixed global
// selection replayed into each micro-batch (its tokens that fall there), the shares with
// a global normaliser add up to the whole batch's loss.
//
// Each returns the aggregated loss and writes grad_out[t] = dL/dlogp_t (0 on masked and
// selected tokens); metrics.clipped counts the selected tokens (veRL's pg_clipfrac),
// approx_kl is the unclamped old_logp - logp (veRL's ppo_kl). KL-Cov: metrics.clipped
// counts the selected tokens too (veRL reports no such metric), approx_kl is the mean of
// |logp - old_logp| over the valid tokens, unweighted (veRL's ppo_kl there).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/policy_loss_spec.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/covariance_tokens.hpp"

namespace cascade_rl {

namespace detail {

inline void validate_clip_cov_options(const clip_cov_options& options) {
  if (!(options.clip_low >= 0))
    fail("options.clip_low", "is " + std::to_string(options.clip_low) + ", expected >= 0");
  if (!(options.clip_high >= 0))
    fail("options.clip_high", "is " + std::to_string(options.clip_high) + ", expected >= 0");
  if (!(options.clip_cov_ratio > 0 && std::isfinite(options.clip_cov_ratio)))
    fail("options.clip_cov_ratio", "is " + std::to_string(options.clip_cov_ratio) +
                                       ", expected a finite value > 0 (veRL asserts it)");
  if (std::isnan(options.clip_cov_lb)) fail("options.clip_cov_lb", "is NaN");
  if (std::isnan(options.clip_cov_ub)) fail("options.clip_cov_ub", "is NaN");
}

// The valid count and the means of A and logp over the valid tokens (0 when none).
struct covariance_means {
  std::size_t valid = 0;
  double advantage = 0;
  double log_prob = 0;
};

template <class Policy, std::floating_point T>
covariance_means covariance_means_of(const Policy& policy, const token_layout& layout,
                                     std::span<const T> advantages, std::span<const T> log_probs) {
  const std::size_t n = layout.tokens();
  covariance_means m;
  m.valid = blocked_reduce(
      policy, n, std::size_t{0},
      [&](std::size_t& acc, std::size_t t) { acc += layout.valid(t) ? 1 : 0; },
      [](std::size_t& total, std::size_t part) { total += part; });
  if (m.valid == 0) return m;
  const double count = static_cast<double>(m.valid);
  m.advantage = blocked_sum(policy, n,
                            [&](std::size_t t) {
                              return layout.valid(t) ? static_cast<double>(advantages[t]) : 0.0;
                            }) /
                count;
  m.log_prob = blocked_sum(policy, n,
                           [&](std::size_t t) {
                             return layout.valid(t) ? static_cast<double>(log_probs[t]) : 0.0;
                           }) /
               count;
  return m;
}

// The `count` tokens of smallest (keys[t], t) among those whose key is not
// terms::not_a_candidate, in increasing index order: the rule of both selections (the
// device paths reach it by a stable sort of every token's key).
inline std::vector<std::size_t> smallest_keyed_tokens(const std::vector<std::uint64_t>& keys,
                                                      std::size_t count) {
  std::vector<std::pair<std::uint64_t, std::size_t>> keyed;
  for (std::size_t t = 0; t < keys.size(); ++t)
    if (keys[t] != terms::not_a_candidate) keyed.emplace_back(keys[t], t);
  if (keyed.size() > count) {
    std::nth_element(keyed.begin(), keyed.begin() + static_cast<std::ptrdiff_t>(count),
                     keyed.end());
    keyed.resize(count);
  }
  std::vector<std::size_t> selected;
  selected.reserve(keyed.size());
  for (const auto& key_token : keyed) selected.push_back(key_token.second);
  std::sort(selected.begin(), selected.end());
  return selected;
}

// Our seeded draw: the candidates' clip_num smallest (key, index), in index order.
template <class Policy, std::floating_point T>
std::vector<std::size_t> seeded_clip_cov_selection(const Policy& policy, const token_layout& layout,
                                                   const policy_ratio_inputs<T>& inputs,
                                                   std::uint64_t seed,
                                                   const clip_cov_options& options) {
  const covariance_means means =
      covariance_means_of(policy, layout, inputs.advantages, inputs.log_probs);
  if (means.valid == 0) return {};
  const clip_cov_options params = options;  // a local copy: stores cannot alias it
  const std::size_t n = layout.tokens();
  std::vector<std::uint64_t> keys(n, terms::not_a_candidate);
  for_each_index(policy, n, [&](std::size_t t) {
    if (!layout.valid(t)) return;
    const double logp = static_cast<double>(inputs.log_probs[t]);
    const double advantage = static_cast<double>(inputs.advantages[t]);
    const double cov = terms::covariance_term(advantage, logp, means.advantage, means.log_prob);
    if (terms::clip_cov_candidate(logp, static_cast<double>(inputs.old_log_probs[t]), advantage,
                                  cov, params))
      keys[t] = terms::selection_key(seed, t);
  });
  return smallest_keyed_tokens(keys, terms::selection_count(options.clip_cov_ratio, means.valid));
}

// KL-Cov's selection: the k = max(floor(kl_cov_ratio * valid), 1) valid tokens of largest
// cov, ties to the smaller index (terms::covariance_key), in index order; none when no
// token is valid.
template <class Policy, std::floating_point T>
std::vector<std::size_t> top_covariance_selection(const Policy& policy, const token_layout& layout,
                                                  std::span<const T> advantages,
                                                  std::span<const T> log_probs, double ratio) {
  const covariance_means means = covariance_means_of(policy, layout, advantages, log_probs);
  if (means.valid == 0) return {};
  const std::size_t n = layout.tokens();
  std::vector<std::uint64_t> keys(n, terms::not_a_candidate);
  for_each_index(policy, n, [&](std::size_t t) {
    if (!layout.valid(t)) return;
    keys[t] = terms::covariance_key(terms::covariance_term(static_cast<double>(advantages[t]),
                                                           static_cast<double>(log_probs[t]),
                                                           means.advantage, means.log_prob));
  });
  return smallest_keyed_tokens(keys, terms::selection_count(ratio, means.valid));
}

// A replayed selection checked (in range, valid(t), not repeated) into a mask of n tokens.
// The device layer passes a valid that accepts every token: its layout is in device
// memory, and the device checks the mask against it before the loss runs.
template <class Valid>
std::vector<std::uint8_t> replayed_selection_mask(std::size_t n,
                                                  std::span<const std::size_t> tokens,
                                                  const Valid& valid) {
  std::vector<std::uint8_t> selected(n, 0);
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    const std::size_t t = tokens[k];
    if (t >= n)
      fail_at("selection.tokens", k,
              "is token " + std::to_string(t) + ", beyond the " + std::to_string(n) + " tokens");
    if (!valid(t))
      fail_at("selection.tokens", k,
              "is token " + std::to_string(t) + ", which the mask leaves out");
    if (selected[t] != 0) fail_at("selection.tokens", k, "repeats token " + std::to_string(t));
    selected[t] = 1;
  }
  return selected;
}

// The selection as a per-token mask: the replayed tokens (checked) or draw()'s, reported
// into selected_out when that is not empty.
template <class Draw>
std::vector<std::uint8_t> selection_mask(const token_layout& layout,
                                         const token_selection& selection, const Draw& draw,
                                         std::span<std::size_t> selected_out) {
  std::vector<std::uint8_t> selected;
  std::size_t count = 0;
  if (selection.replayed) {
    selected = replayed_selection_mask(layout.tokens(), selection.tokens,
                                       [&](std::size_t t) { return layout.valid(t); });
    count = selection.tokens.size();
  } else {
    selected.assign(layout.tokens(), 0);
    const std::vector<std::size_t> drawn = draw();
    for (const std::size_t t : drawn) selected[t] = 1;
    count = drawn.size();
  }
  if (!selected_out.empty()) {
    if (selected_out.size() < count)
      fail("selected_out", "holds " + std::to_string(selected_out.size()) + " entries, but " +
                               std::to_string(count) + " tokens were selected");
    std::size_t k = 0;
    for (std::size_t t = 0; t < selected.size(); ++t)
      if (selected[t] != 0) selected_out[k++] = t;
  }
  return selected;
}

template <class Policy, std::floating_point T>
std::vector<std::uint8_t> clip_cov_selection_mask(const Policy& policy, const token_layout& layout,
                                                  const policy_ratio_inputs<T>& inputs,
                                                  const token_selection& selection,
                                                  const clip_cov_options& options,
                                                  std::span<std::size_t> selected_out) {
  return selection_mask(
      layout, selection,
      [&] { return seeded_clip_cov_selection(policy, layout, inputs, selection.seed, options); },
      selected_out);
}

inline void validate_kl_cov_options(const kl_cov_options& options) {
  if (!(options.kl_cov_ratio > 0 && options.kl_cov_ratio <= 1))
    fail("options.kl_cov_ratio",
         "is " + std::to_string(options.kl_cov_ratio) +
             ", expected a value in (0, 1] (veRL asserts > 0; above 1 torch.topk would be asked "
             "for more tokens than there are)");
  if (!(options.ppo_kl_coef >= 0 && std::isfinite(options.ppo_kl_coef)))
    fail("options.ppo_kl_coef",
         "is " + std::to_string(options.ppo_kl_coef) + ", expected a finite value >= 0");
}

// KL-Cov's overloads with a selection take a replay only (every executor).
inline void require_replayed_kl_cov(const token_selection& selection) {
  if (!selection.replayed)
    fail("selection",
         "is seeded; KL-Cov selects deterministically: pass token_selection::replay(tokens), or "
         "call kl_cov_loss without a selection");
}

// KL-Cov's shared policy passes over a selection mask.
template <class Policy, std::floating_point T>
policy_loss_result kl_cov_passes(const Policy& policy, const token_layout& layout,
                                 const policy_ratio_inputs<T>& inputs,
                                 const std::vector<std::uint8_t>& selected, std::span<T> grad_out,
                                 const loss_normalizer& normalizer, const kl_cov_options& options) {
  const double coef = options.ppo_kl_coef;
  return old_policy_passes(
      policy, layout, inputs, inputs.rollout_is_weights, grad_out, normalizer,
      options.aggregation,
      [&](std::size_t t, double logp, double old_logp, double advantage) CASCADE_RL_ALWAYS_INLINE {
        return terms::kl_cov_token(logp, old_logp, advantage, selected[t] != 0, coef);
      });
}

}  // namespace detail

// Our seeded Clip-Cov selection (token_selection::seeded), in increasing index order:
// for logging, or to replay the same draw elsewhere.
template <exec::host_policy Policy, std::floating_point T>
std::vector<std::size_t> clip_cov_seeded_selection(const Policy& policy, const token_layout& layout,
                                                   const policy_ratio_inputs<T>& inputs,
                                                   std::uint64_t seed,
                                                   const clip_cov_options& options = {}) {
  detail::validate_clip_cov_options(options);
  detail::validate_token_input(policy, layout, inputs.log_probs, "log_probs");
  detail::validate_token_input(policy, layout, inputs.old_log_probs, "old_log_probs");
  detail::validate_token_input(policy, layout, inputs.advantages, "advantages");
  return detail::seeded_clip_cov_selection(policy, layout, inputs, seed, options);
}

// Clip-Cov: l_t = max(-A_t r_t, -A_t clamp(r_t, 1 - clip_low, 1 + clip_high)) * (1 - s_t),
// r_t = exp(logp_t - old_logp_t), s_t = 1 on a selected token (a stop-gradient mask),
// times inputs.rollout_is_weights when given; dl_t/dlogp_t = -A_t r_t where PPO's clip is
// inactive and s_t = 0, else 0. See the top of this file for the selection.
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result clip_cov_loss(const Policy& policy, const token_layout& layout,
                                 const policy_ratio_inputs<output_value_t<Out>>& inputs,
                                 const token_selection& selection, Out&& grad_out,
                                 const loss_normalizer& normalizer,
                                 const clip_cov_options& options = {},
                                 std::span<std::size_t> selected_out = {}) {
  using T = output_value_t<Out>;
  detail::validate_clip_cov_options(options);
  const std::span<const T> log_probs = inputs.log_probs;
  const std::span<const T> old_log_probs = inputs.old_log_probs;
  const std::span<const T> advantages = inputs.advantages;
  // The means read every input, so the inputs are checked before them.
  detail::validate_token_input(policy, layout, log_probs, "log_probs");
  detail::validate_token_input(policy, layout, old_log_probs, "old_log_probs");
  detail::validate_token_input(policy, layout, advantages, "advantages");
  const std::vector<std::uint8_t> selected =
      detail::clip_cov_selection_mask(policy, layout, inputs, selection, options, selected_out);
  const clip_cov_options params = options;  // a local copy: stores cannot alias it
  return detail::old_policy_passes(
      policy, layout, inputs, inputs.rollout_is_weights, output_span(grad_out), normalizer,
      options.aggregation,
      [&](std::size_t t, double logp, double old_logp, double advantage) CASCADE_RL_ALWAYS_INLINE {
        return terms::clip_cov_token(logp, old_logp, advantage, selected[t] != 0, params);
      });
}

// KL-Cov's selection (see the top of this file), in increasing index order: for logging,
// or to replay it elsewhere.
template <exec::host_policy Policy, std::floating_point T>
std::vector<std::size_t> kl_cov_selection(const Policy& policy, const token_layout& layout,
                                          const policy_ratio_inputs<T>& inputs,
                                          const kl_cov_options& options = {}) {
  detail::validate_kl_cov_options(options);
  detail::validate_token_input(policy, layout, inputs.log_probs, "log_probs");
  detail::validate_token_input(policy, layout, inputs.advantages, "advantages");
  return detail::top_covariance_selection(policy, layout, inputs.advantages, inputs.log_probs,
                                          options.kl_cov_ratio);
}

// KL-Cov: l_t = -A_t r_t + s_t ppo_kl_coef |logp_t - old_logp_t|, r_t = exp(logp_t -
// old_logp_t) (no clip, no clamp), s_t = 1 on a selected token, times
// inputs.rollout_is_weights when given; dl_t/dlogp_t = -A_t r_t + s_t ppo_kl_coef
// sign(logp_t - old_logp_t). `selection` is token_selection::replay(tokens) (e.g. veRL's
// topk); the overload without one selects by kl_cov_selection's rule. A seeded selection
// is refused: KL-Cov's rule draws nothing.
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result kl_cov_loss(const Policy& policy, const token_layout& layout,
                               const policy_ratio_inputs<output_value_t<Out>>& inputs,
                               const token_selection& selection, Out&& grad_out,
                               const loss_normalizer& normalizer,
                               const kl_cov_options& options = {},
                               std::span<std::size_t> selected_out = {}) {
  using T = output_value_t<Out>;
  detail::validate_kl_cov_options(options);
  detail::require_replayed_kl_cov(selection);
  const std::span<const T> log_probs = inputs.log_probs;
  const std::span<const T> old_log_probs = inputs.old_log_probs;
  const std::span<const T> advantages = inputs.advantages;
  detail::validate_token_input(policy, layout, log_probs, "log_probs");
  detail::validate_token_input(policy, layout, old_log_probs, "old_log_probs");
  detail::validate_token_input(policy, layout, advantages, "advantages");
  const std::vector<std::uint8_t> selected = detail::selection_mask(
      layout, selection, [] { return std::vector<std::size_t>{}; }, selected_out);
  return detail::kl_cov_passes(policy, layout, inputs, selected, output_span(grad_out), normalizer,
                               options);
}

template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result kl_cov_loss(const Policy& policy, const token_layout& layout,
                               const policy_ratio_inputs<output_value_t<Out>>& inputs,
                               Out&& grad_out, const loss_normalizer& normalizer,
                               const kl_cov_options& options = {},
                               std::span<std::size_t> selected_out = {}) {
  using T = output_value_t<Out>;
  detail::validate_kl_cov_options(options);
  // The means read every input, so the inputs are checked before them.
  detail::validate_token_input(policy, layout, inputs.log_probs, "log_probs");
  detail::validate_token_input(policy, layout, inputs.old_log_probs, "old_log_probs");
  detail::validate_token_input(policy, layout, inputs.advantages, "advantages");
  const std::vector<std::uint8_t> selected = detail::selection_mask(
      layout, token_selection{},
      [&] {
        return detail::top_covariance_selection(
            policy, layout, std::span<const T>(inputs.advantages),
            std::span<const T>(inputs.log_probs), options.kl_cov_ratio);
      },
      selected_out);
  return detail::kl_cov_passes(policy, layout, inputs, selected, output_span(grad_out), normalizer,
                               options);
}

// ---- the specs (policy_loss_spec.hpp) --------------------------------------------------

template <>
struct policy_loss_spec<clip_cov_options> {
  static constexpr selection_use selection = selection_use::drawn;
  static void validate(const clip_cov_options& o) { detail::validate_clip_cov_options(o); }
  template <class Policy, class Layout, std::floating_point T>
  static policy_loss_result run(const Policy& policy, const Layout& layout,
                                const policy_loss_inputs<T>& in, std::span<T> grad_out,
                                const loss_normalizer& normalizer, const clip_cov_options& o) {
    return clip_cov_loss(policy, layout, detail::ratio_inputs_of(in), in.selection, grad_out,
                         normalizer, o);
  }
};

// KL-Cov selects by its own rule; inputs.selection may replay veRL's tokens instead.
template <>
struct policy_loss_spec<kl_cov_options> {
  static constexpr selection_use selection = selection_use::replayable;
  static void validate(const kl_cov_options& o) { detail::validate_kl_cov_options(o); }
  template <class Policy, class Layout, std::floating_point T>
  static policy_loss_result run(const Policy& policy, const Layout& layout,
                                const policy_loss_inputs<T>& in, std::span<T> grad_out,
                                const loss_normalizer& normalizer, const kl_cov_options& o) {
    if (in.selection.replayed)
      return kl_cov_loss(policy, layout, detail::ratio_inputs_of(in), in.selection, grad_out,
                         normalizer, o);
    return kl_cov_loss(policy, layout, detail::ratio_inputs_of(in), grad_out, normalizer, o);
  }
};

}  // namespace cascade_rl
