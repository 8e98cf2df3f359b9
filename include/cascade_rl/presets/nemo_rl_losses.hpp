#pragma once
// NeMo-RL's ClippedPGLossFn conventions (nemo_rl/algorithms/loss/loss_functions.py at
// commit 7ea279ab) as cascade_rl options, by ClippedPGLossConfig's own field names; checked
// against tests/reference/trl_nemo_rl.json (tests/reference/README_trl_nemo_rl.md).
//
//   - The valid tokens are token_mask * sample_mask: build the layout's mask from that
//     product. masked_mean divides by the caller's global count + 1e-8.
//   - token_level_loss = true: token-mean with tokens = global_valid_toks (+1e-8);
//     false: each row's mean over its tokens, then the mean over samples with
//     sequences = global_valid_seqs (+1e-8): seq-mean-token-mean.
//   - The clip: r = exp(curr - prev), no log-ratio clamp, [1 - ratio_clip_min, 1 +
//     ratio_clip_max], ratio_clip_c the dual clip (nullopt: off): ppo_clip_options.
//   - sequence_level_importance_ratios: GSPO's ratio exp(row mean of the log-ratio):
//     gspo_options (its per-token gradient equals NeMo's, the aggregation weight being
//     constant within a row).
//   - use_cispo: -A * sg(clamp(r, ...)) * logp: cispo_options.
//   - disable_ppo_ratio: the "ratio" is the log-prob itself, -A * logp: reinforce_options
//     with the log-prob surrogate. force_on_policy_ratio: r = exp(logp - sg(logp)) = 1:
//     reinforce_options with the ratio surrogate.
//   - use_importance_sampling_correction: the actor loss times exp(prev -
//     generation_logprobs) (stop-gradient), at sequence level exp of the row's masked sum;
//     truncated_importance_sampling_type tis (clamp to [min or 0, ratio]), icepop (0
//     outside [min, ratio]), seq-mask-tis (0 for the whole row when the geometric mean of
//     its ratios leaves [min, ratio]). The PPO clip and force_on_policy_ratio take it as
//     options.importance against behaviour_log_probs = generation_logprobs where an
//     importance_options expresses it (plain, tis without a min, icepop); otherwise (tis
//     with a min, seq-mask-tis), and for every other loss, as rollout_is_weights(...) in
//     inputs.rollout_is_weights (takes_rollout_is_weights says which).
//   - positive_example_nll_weight > 0 adds weight * the mean -logp over the tokens of the
//     rows with reward > 0: a second reinforce_loss, positive_example_nll below.
//
//   - reference_policy_kl_penalty c (unless use_kl_in_reward): c * w * k per token, k the
//     k1 / k2 / k3 estimate of x = ref - logp with NeMo's input clamp on x and output clamp
//     on w * k (for every type, not k3 only), w = exp(logp - sg(logp)) (= 1, but its
//     gradient adds k: d/dlogp = c * w * (k' + k) where no clamp acts, 0 where one does)
//     or, with use_on_policy_kl_approximation, exp(logp - generation_logprobs). No
//     kl_options has that gradient: kl_token_terms() computes the per-token values and
//     gradients for aggregate_token_losses, over the policy term's normaliser.
//
// Refused by name (cascade_rl::error naming the ClippedPGLossConfig field): ratio_clip_c
// with anything but the token ratio's PPO clip (NeMo's own asserts are refused by name
// too).

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/token_loss_terms.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/policy_losses.hpp"

namespace cascade_rl::presets::nemo_rl {

// ClippedPGLossConfig's fields, by NeMo's names, with NeMo's defaults.
struct clipped_pg_loss_config {
  bool disable_ppo_ratio = false;
  bool token_level_loss = true;
  bool sequence_level_importance_ratios = false;
  double ratio_clip_min = 0.2;
  double ratio_clip_max = 0.2;
  std::optional<double> ratio_clip_c{};
  double reference_policy_kl_penalty = 0.01;
  std::string_view reference_policy_kl_type = "k3";
  std::optional<double> kl_input_clamp_value{20.0};   // nullopt: no clamp
  std::optional<double> kl_output_clamp_value{10.0};  // nullopt: no clamp
  bool use_kl_in_reward = false;
  bool use_on_policy_kl_approximation = false;
  bool use_importance_sampling_correction = false;
  std::string_view truncated_importance_sampling_type{};  // "", "tis", "icepop", "seq-mask-tis"
  std::optional<double> truncated_importance_sampling_ratio{};
  std::optional<double> truncated_importance_sampling_ratio_min{};
  bool force_on_policy_ratio = false;
  bool use_cispo = false;
  double positive_example_nll_weight = 0.0;
};

using policy_loss_options =
    std::variant<ppo_clip_options, gspo_options, cispo_options, reinforce_options>;

// masked_mean's epsilon on every divisor.
inline constexpr double masked_mean_epsilon = 1e-8;

namespace detail {

[[noreturn]] inline void refuse(std::string_view field, std::string_view value,
                                std::string_view why) {
  std::string problem = "is ";
  problem.append(value).append(": ").append(why);
  cascade_rl::detail::fail(field, problem);
}

inline constexpr double no_clamp = std::numeric_limits<double>::infinity();
inline const double largest_finite_log = std::log(std::numeric_limits<double>::max());

inline std::string quoted(std::string_view s) { return std::string("\"").append(s).append("\""); }

// NeMo's own asserts (ClippedPGLossFn.__init__), then cascade_rl's refusals.
inline void validate(const clipped_pg_loss_config& c) {
  const std::string_view type = c.truncated_importance_sampling_type;
  if (!type.empty()) {
    if (type != "tis" && type != "icepop" && type != "seq-mask-tis")
      refuse("truncated_importance_sampling_type", quoted(type),
             "NeMo knows tis, icepop and seq-mask-tis");
    if (!c.use_importance_sampling_correction)
      refuse("truncated_importance_sampling_type", quoted(type),
             "needs use_importance_sampling_correction (NeMo asserts)");
    if (!c.truncated_importance_sampling_ratio || !(*c.truncated_importance_sampling_ratio > 0))
      refuse("truncated_importance_sampling_ratio", "unset or <= 0", "expected > 0");
    if (type != "tis" && !c.truncated_importance_sampling_ratio_min)
      refuse("truncated_importance_sampling_ratio_min", "unset",
             "icepop and seq-mask-tis need it (NeMo asserts)");
    if (c.truncated_importance_sampling_ratio_min &&
        !(*c.truncated_importance_sampling_ratio_min <= *c.truncated_importance_sampling_ratio))
      refuse("truncated_importance_sampling_ratio_min",
             std::to_string(*c.truncated_importance_sampling_ratio_min),
             "expected <= truncated_importance_sampling_ratio (NeMo asserts)");
    if (type == "seq-mask-tis" && c.sequence_level_importance_ratios)
      refuse("truncated_importance_sampling_type", quoted(type),
             "incompatible with sequence_level_importance_ratios (NeMo asserts)");
  }
  const std::string_view kl = c.reference_policy_kl_type;
  if (kl != "k1" && kl != "k2" && kl != "k3")
    refuse("reference_policy_kl_type", quoted(kl), "NeMo knows k1, k2 and k3");
  if (c.positive_example_nll_weight != 0.0 && !(c.positive_example_nll_weight > 0))
    refuse("positive_example_nll_weight", std::to_string(c.positive_example_nll_weight),
           "expected >= 0");
}

// The correction as importance_options (the PPO clip's and force_on_policy's way), or
// nullopt when no importance_options expresses it (tis with a min, seq-mask-tis): the
// weights are then precomputed (rollout_is_weights).
inline std::optional<importance_options> importance_as_options(const clipped_pg_loss_config& c) {
  if (!c.use_importance_sampling_correction) return importance_options{};
  const std::string_view type = c.truncated_importance_sampling_type;
  if (type.empty())
    return importance_options{.mode = importance_sampling::truncated, .cap = no_clamp};
  if (type == "tis" && !c.truncated_importance_sampling_ratio_min)
    return importance_options{.mode = importance_sampling::truncated,
                              .cap = *c.truncated_importance_sampling_ratio};
  if (type == "icepop")
    return importance_options{.mode = importance_sampling::band_mask,
                              .band_low = *c.truncated_importance_sampling_ratio_min,
                              .band_high = *c.truncated_importance_sampling_ratio};
  return std::nullopt;
}

}  // namespace detail

// The aggregation of token_level_loss.
[[nodiscard]] inline loss_aggregation aggregation(const clipped_pg_loss_config& c) {
  return c.token_level_loss ? loss_aggregation::token_mean : loss_aggregation::seq_mean_token_mean;
}

// The actor loss of ClippedPGLossFn for the config, or an error naming the field
// cascade_rl cannot express.
[[nodiscard]] inline policy_loss_options policy_loss(const clipped_pg_loss_config& c) {
  detail::validate(c);
  const loss_aggregation mode = aggregation(c);
  if (c.use_cispo) {
    if (c.disable_ppo_ratio || c.force_on_policy_ratio || c.sequence_level_importance_ratios ||
        c.ratio_clip_c || !c.token_level_loss)
      detail::refuse("use_cispo", "true",
                     "NeMo asserts it runs without disable_ppo_ratio, force_on_policy_ratio, "
                     "sequence_level_importance_ratios, ratio_clip_c and with token_level_loss");
    return cispo_options{.clip_low = c.ratio_clip_min,
                         .clip_high = c.ratio_clip_max,
                         .log_ratio_clamp = detail::no_clamp,
                         .aggregation = mode};
  }
  if (c.ratio_clip_c &&
      (c.force_on_policy_ratio || c.disable_ppo_ratio || c.sequence_level_importance_ratios))
    detail::refuse("ratio_clip_c", std::to_string(*c.ratio_clip_c),
                   "the dual clip is supported on the token ratio's PPO clip only");
  if (c.ratio_clip_c && !(*c.ratio_clip_c > 1.0))
    detail::refuse("ratio_clip_c", std::to_string(*c.ratio_clip_c), "expected > 1 (NeMo asserts)");
  // The PPO clip and force_on_policy_ratio: the correction as options where they express
  // it, else as precomputed inputs.rollout_is_weights (none in the options).
  const importance_options importance =
      detail::importance_as_options(c).value_or(importance_options{});
  if (c.force_on_policy_ratio)
    return reinforce_options{
        .aggregation = mode, .surrogate = reinforce_surrogate::ratio, .importance = importance};
  if (c.disable_ppo_ratio)
    return reinforce_options{
        .aggregation = mode, .surrogate = reinforce_surrogate::log_prob, .importance = {}};
  if (c.sequence_level_importance_ratios)
    return gspo_options{.clip_low = c.ratio_clip_min,
                        .clip_high = c.ratio_clip_max,
                        .log_ratio_bound = detail::largest_finite_log,
                        .aggregation = mode};
  return ppo_clip_options{.clip_low = c.ratio_clip_min,
                          .clip_high = c.ratio_clip_max,
                          .dual_clip = c.ratio_clip_c,
                          .log_ratio_clamp = detail::no_clamp,
                          .aggregation = mode,
                          .importance = importance};
}

// masked_mean's divisors: global_valid_toks or global_valid_seqs, each + 1e-8.
[[nodiscard]] inline loss_normalizer normalizer(const clipped_pg_loss_config& c,
                                                double global_valid_toks,
                                                double global_valid_seqs) {
  return c.token_level_loss ? loss_normalizer{.mode = loss_aggregation::token_mean,
                                              .tokens = global_valid_toks + masked_mean_epsilon}
                            : loss_normalizer{.mode = loss_aggregation::seq_mean_token_mean,
                                              .sequences = global_valid_seqs + masked_mean_epsilon};
}

// Whether policy_loss's options take the correction as precomputed inputs.rollout_is_weights
// (GSPO, CISPO, disable_ppo_ratio; the PPO clip and force_on_policy_ratio under tis with a
// min or seq-mask-tis) rather than as options.importance.
[[nodiscard]] inline bool takes_rollout_is_weights(const clipped_pg_loss_config& c) {
  return c.use_importance_sampling_correction &&
         (c.use_cispo || c.sequence_level_importance_ratios ||
          (c.disable_ppo_ratio && !c.force_on_policy_ratio) || !detail::importance_as_options(c));
}

// NeMo's actor importance weights for the losses that take them as inputs (see
// takes_rollout_is_weights; empty otherwise): per token exp(prev - generation), or at
// sequence level exp of the row's masked sum, then tis / icepop / seq-mask-tis. A non-finite
// weight becomes 0 (NeMo's nan_to_num). The layout's mask is token_mask * sample_mask.
template <class T>
[[nodiscard]] std::vector<T> rollout_is_weights(const clipped_pg_loss_config& c,
                                                const token_layout& layout,
                                                std::span<const T> prev_logprobs,
                                                std::span<const T> generation_logprobs) {
  if (!takes_rollout_is_weights(c)) return {};
  detail::validate(c);
  cascade_rl::detail::require_size(prev_logprobs.size(), layout.tokens(), "prev_logprobs",
                                   "one per token");
  cascade_rl::detail::require_size(generation_logprobs.size(), layout.tokens(),
                                   "generation_logprobs", "one per token");
  const auto finite_or_zero = [](double w) { return std::isfinite(w) ? w : 0.0; };
  const std::string_view type = c.truncated_importance_sampling_type;
  const double high = c.truncated_importance_sampling_ratio.value_or(0.0);
  const double low = c.truncated_importance_sampling_ratio_min.value_or(0.0);
  std::vector<T> out(layout.tokens(), T(0));
  for (std::size_t s = 0; s < layout.sequences(); ++s) {
    double log_sum = 0;
    std::size_t n = 0;
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
      if (layout.valid(t)) {
        log_sum +=
            static_cast<double>(prev_logprobs[t]) - static_cast<double>(generation_logprobs[t]);
        ++n;
      }
    // seq-mask-tis: the geometric mean of the row's ratios inside [low, high] keeps it.
    const double geo = std::exp(log_sum / (static_cast<double>(n) + masked_mean_epsilon));
    const double row_kept = type != "seq-mask-tis" || (geo >= low && geo <= high) ? 1.0 : 0.0;
    const double sequence_weight = finite_or_zero(std::exp(log_sum));
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
      if (!layout.valid(t)) continue;
      double w = c.sequence_level_importance_ratios
                     ? sequence_weight
                     : finite_or_zero(std::exp(static_cast<double>(prev_logprobs[t]) -
                                               static_cast<double>(generation_logprobs[t])));
      if (type == "tis") w = std::min(std::max(w, low), high);
      if (type == "icepop") w = (w >= low && w <= high) ? w : 0.0;
      out[t] = static_cast<T>(w * row_kept);
    }
  }
  return out;
}

// positive_example_nll_weight's extra loss, weight * masked_mean(-logp) over the tokens of
// the rows whose reward is > 0 (divided by their count + 1e-8): reinforce_loss with the
// log-prob surrogate, token-mean over `normalizer`, and the weight as each such token's
// advantage (0 elsewhere). nullopt when the weight is 0 or no valid token has a positive
// reward (NeMo then adds 0).
template <class T>
struct positive_example_nll_term {
  reinforce_options options;
  loss_normalizer normalizer;
  std::vector<T> advantages;  // one per token
};

template <class T>
[[nodiscard]] std::optional<positive_example_nll_term<T>> positive_example_nll(
    const clipped_pg_loss_config& c, const token_layout& layout, std::span<const T> rewards) {
  if (!(c.positive_example_nll_weight > 0)) return std::nullopt;
  cascade_rl::detail::require_size(rewards.size(), layout.sequences(), "rewards",
                                   "one per sequence");
  positive_example_nll_term<T> term{.options = {.aggregation = loss_aggregation::token_mean,
                                                .surrogate = reinforce_surrogate::log_prob,
                                                .importance = {}},
                                    .normalizer = {.mode = loss_aggregation::token_mean},
                                    .advantages = std::vector<T>(layout.tokens(), T(0))};
  std::size_t count = 0;
  for (std::size_t s = 0; s < layout.sequences(); ++s) {
    if (!(static_cast<double>(rewards[s]) > 0)) continue;
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
      if (layout.valid(t)) {
        term.advantages[t] = static_cast<T>(c.positive_example_nll_weight);
        ++count;
      }
  }
  if (count == 0) return std::nullopt;
  term.normalizer.tokens = static_cast<double>(count) + masked_mean_epsilon;
  return term;
}

// The KL term's per-token values and gradients (see the header) for aggregate_token_losses
// with the policy term's normaliser and aggregation(c); empty when the KL is not in the
// loss. generation_logprobs are read only with use_on_policy_kl_approximation.
template <std::floating_point T>
[[nodiscard]] token_loss_terms<T> kl_token_terms(const clipped_pg_loss_config& c,
                                                 const token_layout& layout,
                                                 std::span<const T> log_probs,
                                                 std::span<const T> ref_log_probs,
                                                 std::span<const T> generation_logprobs) {
  detail::validate(c);
  token_loss_terms<T> out;
  if (c.reference_policy_kl_penalty == 0.0 || c.use_kl_in_reward) return out;
  const std::size_t n = layout.tokens();
  cascade_rl::detail::require_size(log_probs.size(), n, "log_probs", "one per token");
  cascade_rl::detail::require_size(ref_log_probs.size(), n, "ref_log_probs", "one per token");
  if (c.use_on_policy_kl_approximation)
    cascade_rl::detail::require_size(generation_logprobs.size(), n, "generation_logprobs",
                                     "one per token");
  const std::string_view type = c.reference_policy_kl_type;
  const double coef = c.reference_policy_kl_penalty;
  out.token_losses.assign(n, T(0));
  out.token_grads.assign(n, T(0));
  for (std::size_t t = 0; t < n; ++t) {
    if (!layout.valid(t)) continue;
    const double logp = static_cast<double>(log_probs[t]);
    const double raw = static_cast<double>(ref_log_probs[t]) - logp;
    double x = raw;
    bool clamped = false;
    if (c.kl_input_clamp_value) {
      const double b = *c.kl_input_clamp_value;
      x = std::min(std::max(raw, -b), b);
      clamped = x != raw;
    }
    // k and dk/dlogp (x = ref - logp, dx/dlogp = -1).
    double k = 0, dk = 0;
    if (type == "k1") {
      k = -x;
      dk = 1.0;
    } else if (type == "k2") {
      k = 0.5 * x * x;
      dk = -x;
    } else {
      k = std::exp(x) - 1.0 - x;
      dk = -(std::exp(x) - 1.0);
    }
    double w = 1.0;
    if (c.use_on_policy_kl_approximation)
      w = std::exp(logp - static_cast<double>(generation_logprobs[t]));
    if (!std::isfinite(w)) w = 0.0;  // nan_to_num
    double value = w * k;
    double grad = clamped ? 0.0 : w * (dk + k);
    if (c.kl_output_clamp_value) {
      const double b = *c.kl_output_clamp_value;
      const double v = std::min(std::max(value, -b), b);
      if (v != value) grad = 0.0;
      value = v;
    }
    out.token_losses[t] = static_cast<T>(coef * value);
    out.token_grads[t] = static_cast<T>(coef * grad);
  }
  return out;
}

}  // namespace cascade_rl::presets::nemo_rl
