#pragma once
// TRL's GRPOTrainer loss conventions (trl/trainer/grpo_trainer.py, _compute_loss, at commit
// f2cd5771) as cascade_rl options, by GRPOConfig's own field names; checked against
// tests/reference/trl_nemo_rl.json (tests/reference/README_trl_nemo_rl.md).
//
// TRL's loss_type is an aggregation (how the per-token loss becomes a scalar), and for
// cispo / sapo also the token term; importance_sampling_level picks the ratio:
//   grpo     mean over ALL rows of each row's masked token mean, / gradient accumulation
//            steps: seq-mean-token-mean with sequences = rows * steps (a fully masked row
//            counts in the mean, unlike veRL's);
//   bnpo     masked sum / the micro-batch's own valid tokens, / steps: token-mean with
//            tokens = local valid tokens * steps (TRL's micro-batch normaliser: not
//            invariant to how the step is cut into micro-batches);
//   dr_grpo  masked sum / (rows * max_completion_length), / steps:
//            seq-mean-token-sum-norm with sequences = rows * steps, scale =
//            max_completion_length;
//   dapo     masked sum / (num_items_in_batch / num_processes), no division by steps:
//            token-mean with tokens = num_items_in_batch / num_processes (the step's
//            global valid-token count, TRL's default loss_type);
//   cispo    dapo's aggregation, the token term -sg(min(r, epsilon_high)) * A * logp
//            (epsilon_high is the ratio cap itself, not 1 + epsilon); at sequence level r
//            is the row's ratio: the REINFORCE log-prob surrogate with
//            cispo_sequence_weights as rollout_is_weights;
//   sapo     grpo's aggregation, the soft gate sigmoid(tau (r - 1)) * 4 / tau;
//   luspo    (per-sequence loss * the row's valid tokens).mean() over rows, / steps: with
//            the sequence-level ratio, seq-mean-token-sum with sequences = rows * steps;
//   vespo    dapo's aggregation, the token term -phi * A * logp with phi the row's gamma
//            weight of its summed log-ratio (stop-gradient, vespo_weights): the REINFORCE
//            log-prob surrogate with phi as rollout_is_weights.
// The clip: r = exp(logp - old_logp), no log-ratio clamp; -min(r A, clamp(r, 1 -
// epsilon_low, 1 + epsilon_high) A); delta (two-sided clipping) caps r at delta, which for
// delta >= 1 + epsilon_high is exactly PPO's dual clip with c = delta.
// importance_sampling_level "sequence" is GSPO's ratio (the mean log-ratio over the row's
// valid tokens), clipped the same way; its gradient per token equals gspo_loss's because
// every aggregation weight is constant within a row.
// beta > 0 adds beta * k3(ref - logp) per token (no clamps), aggregated like the policy
// term: kl_loss with presets::trl::kl_loss's options and the same normaliser.
// The vLLM importance-sampling correction multiplies the token loss by
// r = exp(old_logp - sampling_logp) (token_*) or by the row's exp(sum of old_logp -
// sampling_logp) (sequence_*), clamped to [clip_min, clip_max] (*_truncate) or 0 outside
// it (*_mask): ppo_clip_options::importance (truncated at clip_max / band_mask) against
// the behaviour log-probs vllm_behaviour_log_probs() returns, old_logp - log r' with r' the
// token's or the row's ratio, raised to clip_min under *_truncate: the importance ratio
// exp(old - behaviour) is then TRL's before its upper clamp or its mask.
//
// top_entropy_quantile < 1 and off_policy_mask_threshold drop tokens' policy loss (not
// their KL) by data-dependent masks: masked_advantages() returns the advantages with 0
// where TRL drops the token; pass them as the loss's advantages (the clip metrics then
// count the dropped tokens as unclipped, where TRL counts them from the raw advantages).
//
// The static entropy bonus (entropy_coef) subtracts coef * the mean entropy of the kept
// tokens: entropy_bonus() gives the normaliser for aggregate_token_losses over
// -coef * H_t (its grad_out is the entropy seed h of log_probs_backward); TRL's adaptive
// entropy controller is not covered.
//
// Conventions with no cascade_rl expression are refused by name (policy_loss throws
// cascade_rl::error naming the GRPOConfig field): luspo at token level
// (TRL averages over the padded positions too); sapo at sequence level;
// delta with sequence level; use_bias_correction_kl at sequence level.
// use_bias_correction_kl at token level: beta * r * k3 with r = exp(logp - old) not
// detached, whose gradient is beta * r * (k3' + k3): bias_corrected_kl_terms() for
// aggregate_token_losses.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cascade_rl/algorithms/kl_loss_options.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/loss_counts.hpp"
#include "cascade_rl/algorithms/policy_loss_options.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/token_layout.hpp"

namespace cascade_rl::presets::trl {

// GRPOConfig's (and GRPOTrainer's) fields that _compute_loss reads, by TRL's names, with
// TRL's defaults.
struct grpo_config {
  std::string_view loss_type = "dapo";
  std::string_view importance_sampling_level = "token";
  double epsilon_low = 0.2;              // GRPOConfig.epsilon
  std::optional<double> epsilon_high{};  // nullopt: epsilon_low (TRL's default)
  std::optional<double> delta{};         // two-sided clipping; nullopt: off
  double beta = 0.0;                     // KL coefficient
  bool use_bias_correction_kl = false;
  double top_entropy_quantile = 1.0;
  std::optional<double> off_policy_mask_threshold{};
  double entropy_coef = 0.0;                // the static entropy bonus
  std::size_t max_completion_length = 256;  // dr_grpo's constant
  std::size_t gradient_accumulation_steps = 1;
  std::size_t num_processes = 1;  // dapo / cispo: num_items_in_batch / this
  double sapo_temperature_pos = 1.0;
  double sapo_temperature_neg = 1.05;
  // The vLLM importance-sampling correction (use_vllm and
  // vllm_importance_sampling_correction).
  bool vllm_importance_sampling_correction = false;
  std::string_view vllm_importance_sampling_mode = "sequence_mask";
  std::optional<double> vllm_importance_sampling_clip_min{};
  std::optional<double> vllm_importance_sampling_clip_max{3.0};
  // VESPO's gamma weights (get_gamma_weights' defaults).
  double vespo_k_pos = 2.0;
  double vespo_lambda_pos = 3.0;
  double vespo_k_neg = 3.0;
  double vespo_lambda_neg = 2.0;
};

using policy_loss_options =
    std::variant<ppo_clip_options, gspo_options, cispo_options, sapo_options, reinforce_options>;

namespace detail {

[[noreturn]] inline void refuse(std::string_view field, std::string_view value,
                                std::string_view why) {
  std::string problem = "is ";
  problem.append(value).append(": ").append(why);
  cascade_rl::detail::fail(field, problem);
}

// TRL applies no log-ratio clamp. ppo_clip / cispo / sapo take an infinite bound;
// gspo_options needs a finite one: the largest log whose exp is finite.
inline constexpr double no_clamp = std::numeric_limits<double>::infinity();
inline const double largest_finite_log = std::log(std::numeric_limits<double>::max());

inline bool is_sequence_level(const grpo_config& c) {
  if (c.importance_sampling_level == "token") return false;
  if (c.importance_sampling_level == "sequence") return true;
  refuse("importance_sampling_level",
         std::string("\"") + std::string(c.importance_sampling_level) + "\"",
         "TRL knows token and sequence");
}

inline double epsilon_high_of(const grpo_config& c) {
  return c.epsilon_high ? *c.epsilon_high : c.epsilon_low;
}

// The refusals every loss_type shares.
inline void refuse_unsupported(const grpo_config& c) {
  if (!(c.top_entropy_quantile > 0.0 && c.top_entropy_quantile <= 1.0))
    refuse("top_entropy_quantile", std::to_string(c.top_entropy_quantile), "expected in (0, 1]");
  if (!std::isfinite(c.entropy_coef))
    refuse("entropy_coef", std::to_string(c.entropy_coef), "expected a finite coefficient");
  if (c.beta != 0.0 && c.use_bias_correction_kl && c.importance_sampling_level == "sequence")
    refuse("use_bias_correction_kl", "true",
           "at sequence level the KL times the row's differentiated ratio couples the row's "
           "tokens' gradients: not supported (token level is: bias_corrected_kl_terms)");
}

inline importance_options vllm_importance(const grpo_config& c) {
  if (!c.vllm_importance_sampling_correction) return {};
  const std::string_view mode = c.vllm_importance_sampling_mode;
  const double clip_max = c.vllm_importance_sampling_clip_max
                              ? *c.vllm_importance_sampling_clip_max
                              : std::numeric_limits<double>::infinity();
  if (mode == "token_truncate" || mode == "sequence_truncate")
    return {.mode = importance_sampling::truncated, .cap = clip_max};
  if (mode == "token_mask" || mode == "sequence_mask")
    return {.mode = importance_sampling::band_mask,
            .band_low = c.vllm_importance_sampling_clip_min.value_or(0.0),
            .band_high = clip_max};
  refuse("vllm_importance_sampling_mode", std::string("\"") + std::string(mode) + "\"",
         "TRL knows token_truncate, token_mask, sequence_truncate, sequence_mask");
}

}  // namespace detail

// The aggregation mode of a loss_type (see the table above).
[[nodiscard]] inline loss_aggregation aggregation(std::string_view loss_type) {
  if (loss_type == "grpo" || loss_type == "sapo") return loss_aggregation::seq_mean_token_mean;
  if (loss_type == "bnpo" || loss_type == "dapo" || loss_type == "cispo" || loss_type == "vespo")
    return loss_aggregation::token_mean;
  if (loss_type == "dr_grpo") return loss_aggregation::seq_mean_token_sum_norm;
  if (loss_type == "luspo") return loss_aggregation::seq_mean_token_sum;
  detail::refuse("loss_type", std::string("\"") + std::string(loss_type) + "\"",
                 "not a TRL loss_type (grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo)");
}

// The policy term of _compute_loss for the config (see the table above), or an error
// naming the GRPOConfig field cascade_rl cannot express.
[[nodiscard]] inline policy_loss_options policy_loss(const grpo_config& c) {
  const loss_aggregation mode = aggregation(c.loss_type);
  detail::refuse_unsupported(c);
  const bool sequence = detail::is_sequence_level(c);
  const double eps_high = detail::epsilon_high_of(c);
  const importance_options importance = detail::vllm_importance(c);
  if (c.loss_type == "vespo")
    // -phi * A * logp with phi a stop-gradient row weight (vespo_weights, which also holds
    // the vLLM correction): the log-prob surrogate, token-mean; at either level.
    return reinforce_options{
        .aggregation = mode, .surrogate = reinforce_surrogate::log_prob, .importance = {}};
  if (sequence && importance.mode != importance_sampling::none)
    detail::refuse("importance_sampling_level", "\"sequence\"",
                   "the vLLM correction is supported at token level only");
  if (c.loss_type == "cispo") {
    if (sequence && importance.mode == importance_sampling::none)
      // -sg(min(s, epsilon_high)) * A * logp, s the row's ratio: the log-prob surrogate with
      // cispo_sequence_weights as rollout_is_weights.
      return reinforce_options{
          .aggregation = mode, .surrogate = reinforce_surrogate::log_prob, .importance = {}};
    if (importance.mode != importance_sampling::none)
      detail::refuse("vllm_importance_sampling_correction", "true",
                     "cispo takes the correction as precomputed rollout_is_weights");
    // clamp(r, max=epsilon_high): no floor (1 - clip_low <= 0), ceiling epsilon_high.
    return cispo_options{.clip_low = 1.0,
                         .clip_high = eps_high - 1.0,
                         .log_ratio_clamp = detail::no_clamp,
                         .aggregation = mode};
  }
  if (c.loss_type == "sapo") {
    if (sequence)
      detail::refuse("importance_sampling_level", "\"sequence\"",
                     "sapo's gate of the sequence ratio is not supported (token only)");
    if (importance.mode != importance_sampling::none)
      detail::refuse("vllm_importance_sampling_correction", "true",
                     "sapo takes the correction as precomputed rollout_is_weights");
    return sapo_options{.tau_pos = c.sapo_temperature_pos,
                        .tau_neg = c.sapo_temperature_neg,
                        .log_ratio_clamp = detail::no_clamp,
                        .aggregation = mode};
  }
  if (c.loss_type == "luspo" && !sequence)
    detail::refuse("importance_sampling_level", "\"token\"",
                   "luspo at token level averages over the padded positions too; only "
                   "\"sequence\" is supported");
  if (sequence) {
    if (c.delta)
      detail::refuse("delta", std::to_string(*c.delta),
                     "two-sided clipping of the sequence ratio is not supported");
    return gspo_options{.clip_low = c.epsilon_low,
                        .clip_high = eps_high,
                        .log_ratio_bound = detail::largest_finite_log,
                        .aggregation = mode};
  }
  if (c.delta && !(*c.delta >= 1.0 + eps_high))
    detail::refuse("delta", std::to_string(*c.delta),
                   "below 1 + epsilon_high the cap is not a dual clip (expected >= 1 + "
                   "epsilon_high)");
  return ppo_clip_options{.clip_low = c.epsilon_low,
                          .clip_high = eps_high,
                          .dual_clip = c.delta,
                          .log_ratio_clamp = detail::no_clamp,
                          .aggregation = mode,
                          .importance = importance};
}

// The beta * k3 term (exp(ref - logp) - (ref - logp) - 1, no clamps), aggregated like the
// policy term; nullopt when beta is 0.
[[nodiscard]] inline std::optional<kl_loss_options> kl_loss(const grpo_config& c) {
  if (c.beta == 0.0) return std::nullopt;
  detail::refuse_unsupported(c);
  if (c.use_bias_correction_kl)
    detail::refuse("use_bias_correction_kl", "true",
                   "the KL times the differentiated ratio is no kl_options: use "
                   "bias_corrected_kl_terms with aggregate_token_losses");
  return kl_loss_options{.kl = {.estimator = kl_estimator::k3,
                                .input_clamp = detail::no_clamp,
                                .output_clamp = detail::no_clamp},
                         .coefficient = c.beta,
                         .aggregation = aggregation(c.loss_type)};
}

// _compute_loss's divisors for one micro-batch of `rows` rows holding `local_tokens` valid
// tokens, as a loss_normalizer for aggregation(loss_type). num_items_in_batch is the step's
// valid tokens over every process and micro-batch (dapo / cispo read only it).
[[nodiscard]] inline loss_normalizer normalizer(const grpo_config& c, std::size_t rows,
                                                std::size_t local_tokens,
                                                double num_items_in_batch) {
  const loss_aggregation mode = aggregation(c.loss_type);
  const double steps = static_cast<double>(c.gradient_accumulation_steps);
  const double n = static_cast<double>(rows);
  loss_normalizer out{.mode = mode};
  if (c.loss_type == "dapo" || c.loss_type == "cispo" || c.loss_type == "vespo") {
    // clamp(min=1) / num_processes, as TRL.
    out.tokens = std::max(num_items_in_batch, 1.0) / static_cast<double>(c.num_processes);
  } else if (c.loss_type == "bnpo") {
    out.tokens = std::max(static_cast<double>(local_tokens), 1.0) * steps;
  } else {
    out.sequences = n * steps;
    out.scale = static_cast<double>(c.max_completion_length);
  }
  return out;
}

// The same, counting the layout's rows and valid tokens.
template <exec::host_policy Policy>
[[nodiscard]] loss_normalizer normalizer(const Policy& policy, const grpo_config& c,
                                         const token_layout& layout, double num_items_in_batch) {
  return normalizer(c, layout.sequences(), local_loss_counts(policy, layout).tokens,
                    num_items_in_batch);
}

// TRL's high-entropy token mask (get_high_entropy_mask): 1 on the valid tokens whose
// entropy is at least the quantile 1 - top_entropy_quantile of the valid tokens'
// entropies (torch.quantile's linear interpolation), 0 elsewhere; every valid token when
// top_entropy_quantile is 1.
template <std::floating_point T>
[[nodiscard]] std::vector<std::uint8_t> entropy_mask(const grpo_config& c,
                                                     const token_layout& layout,
                                                     std::span<const T> entropies) {
  detail::refuse_unsupported(c);
  const std::size_t n = layout.tokens();
  std::vector<std::uint8_t> keep(n, 0);
  for (std::size_t t = 0; t < n; ++t) keep[t] = layout.valid(t) ? 1 : 0;
  if (!(c.top_entropy_quantile < 1.0)) return keep;
  cascade_rl::detail::require_size(entropies.size(), n, "entropies", "one per token");
  std::vector<double> valid;
  for (std::size_t t = 0; t < n; ++t)
    if (layout.valid(t)) valid.push_back(static_cast<double>(entropies[t]));
  if (valid.empty()) return keep;
  std::sort(valid.begin(), valid.end());
  const double position = (1.0 - c.top_entropy_quantile) * static_cast<double>(valid.size() - 1);
  const std::size_t low = static_cast<std::size_t>(position);
  const std::size_t high = std::min(low + 1, valid.size() - 1);
  const double threshold =
      valid[low] + (position - static_cast<double>(low)) * (valid[high] - valid[low]);
  for (std::size_t t = 0; t < n; ++t)
    keep[t] = keep[t] && static_cast<double>(entropies[t]) >= threshold ? 1 : 0;
  return keep;
}

// The advantages (one per token) after TRL's token masks: 0 where top_entropy_quantile < 1
// drops a valid token whose entropy is below the quantile 1 - top_entropy_quantile of the
// valid tokens' entropies (torch.quantile's linear interpolation), and on every token of
// a row that off_policy_mask_threshold drops (A < 0 and the row's mean of
// sampling_log_probs - log_probs above the threshold; sampling_log_probs are the vLLM
// sampler's, or old_log_probs without vLLM). Entropies are read only for the first,
// sampling_log_probs only for the second. A copy of `advantages` when neither is set.
template <std::floating_point T>
[[nodiscard]] std::vector<T> masked_advantages(const grpo_config& c, const token_layout& layout,
                                               std::span<const T> advantages,
                                               std::span<const T> log_probs,
                                               std::span<const T> sampling_log_probs,
                                               std::span<const T> entropies) {
  detail::refuse_unsupported(c);
  const std::size_t n = layout.tokens();
  cascade_rl::detail::require_size(advantages.size(), n, "advantages", "one per token");
  std::vector<T> out(advantages.begin(), advantages.end());
  if (c.top_entropy_quantile < 1.0) {
    const std::vector<std::uint8_t> keep = entropy_mask(c, layout, entropies);
    for (std::size_t t = 0; t < n; ++t)
      if (!keep[t]) out[t] = T(0);
  }
  if (c.off_policy_mask_threshold) {
    cascade_rl::detail::require_size(log_probs.size(), n, "log_probs", "one per token");
    cascade_rl::detail::require_size(sampling_log_probs.size(), n, "sampling_log_probs",
                                     "one per token");
    for (std::size_t s = 0; s < layout.sequences(); ++s) {
      double sum = 0;
      std::size_t count = 0;
      for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
        if (layout.valid(t)) {
          sum += static_cast<double>(sampling_log_probs[t]) - static_cast<double>(log_probs[t]);
          ++count;
        }
      const double mean = sum / std::max(static_cast<double>(count), 1.0);
      for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
        const bool keep =
            static_cast<double>(advantages[t]) >= 0 || mean <= *c.off_policy_mask_threshold;
        if (!keep) out[t] = T(0);
      }
    }
  }
  return out;
}

// The static entropy bonus, -entropy_coef * (the kept tokens' entropy sum) / divisor, as
// the token-mean normaliser of aggregate_token_losses over token losses -entropy_coef * H_t
// (token grads -entropy_coef, giving log_probs_backward's entropy seed) on the kept
// tokens (entropy_mask; 0 elsewhere). The divisor is dapo / cispo's num_items_in_batch /
// num_processes, else the kept tokens' count (at least 1) * gradient accumulation steps.
// nullopt when entropy_coef is 0.
[[nodiscard]] inline std::optional<loss_normalizer> entropy_bonus(const grpo_config& c,
                                                                  std::size_t kept_tokens,
                                                                  double num_items_in_batch) {
  detail::refuse_unsupported(c);
  if (c.entropy_coef == 0.0) return std::nullopt;
  (void)aggregation(c.loss_type);  // refuses an unknown loss_type
  const bool global = c.loss_type == "dapo" || c.loss_type == "cispo" || c.loss_type == "vespo";
  return loss_normalizer{
      .mode = loss_aggregation::token_mean,
      .tokens = global ? std::max(num_items_in_batch, 1.0) / static_cast<double>(c.num_processes)
                       : std::max(static_cast<double>(kept_tokens), 1.0) *
                             static_cast<double>(c.gradient_accumulation_steps)};
}

// The behaviour log-probs for policy_loss's importance options under the vLLM correction
// (see the header): old - log r' per valid token, r' = exp(old - sampling) for token_*,
// the row's exp(sum over its valid tokens of old - sampling) for sequence_*, and under
// *_truncate max(r', clip_min) (in the log domain). Masked tokens get old_log_probs.
// Empty when the correction is off.
template <std::floating_point T>
[[nodiscard]] std::vector<T> vllm_behaviour_log_probs(const grpo_config& c,
                                                      const token_layout& layout,
                                                      std::span<const T> old_log_probs,
                                                      std::span<const T> sampling_log_probs) {
  if (!c.vllm_importance_sampling_correction) return {};
  (void)detail::vllm_importance(c);  // refuses an unknown mode
  const std::size_t n = layout.tokens();
  cascade_rl::detail::require_size(old_log_probs.size(), n, "old_log_probs", "one per token");
  cascade_rl::detail::require_size(sampling_log_probs.size(), n, "sampling_log_probs",
                                   "one per token");
  const std::string_view mode = c.vllm_importance_sampling_mode;
  const bool sequence = mode.starts_with("sequence");
  const bool truncate = mode.ends_with("truncate");
  const double log_min = truncate && c.vllm_importance_sampling_clip_min
                             ? std::log(*c.vllm_importance_sampling_clip_min)
                             : -std::numeric_limits<double>::infinity();
  std::vector<T> out(old_log_probs.begin(), old_log_probs.end());
  for (std::size_t s = 0; s < layout.sequences(); ++s) {
    double row = 0;
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
      if (layout.valid(t))
        row += static_cast<double>(old_log_probs[t]) - static_cast<double>(sampling_log_probs[t]);
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
      if (!layout.valid(t)) continue;
      const double log_ratio = sequence ? row
                                        : static_cast<double>(old_log_probs[t]) -
                                              static_cast<double>(sampling_log_probs[t]);
      out[t] = static_cast<T>(static_cast<double>(old_log_probs[t]) - std::max(log_ratio, log_min));
    }
  }
  return out;
}

// VESPO's gamma weights (get_gamma_weights), one per token (its row's): with
// log w = clamp(sum over the row's valid tokens of clamp(logp - old, +-20) [+ the sum over
// the row of log(clamp(IS ratio, 1e-8, e^20)) under the vLLM correction], log 1e-8, 20),
// phi = exp(lambda + k log w - lambda w), (k, lambda) = vespo_*_pos for A >= 0 else
// vespo_*_neg (lambda at least 1e-4), non-finite -> 0. The IS ratio is TRL's processed
// one (clamped under *_truncate, 0 outside [clip_min, clip_max] under *_mask), 1 before
// processing on padding. advantages: one per token (the row's).
template <std::floating_point T>
[[nodiscard]] std::vector<T> vespo_weights(const grpo_config& c, const token_layout& layout,
                                           std::span<const T> advantages,
                                           std::span<const T> log_probs,
                                           std::span<const T> old_log_probs,
                                           std::span<const T> sampling_log_probs = {}) {
  const std::size_t n = layout.tokens();
  cascade_rl::detail::require_size(advantages.size(), n, "advantages", "one per token");
  cascade_rl::detail::require_size(log_probs.size(), n, "log_probs", "one per token");
  cascade_rl::detail::require_size(old_log_probs.size(), n, "old_log_probs", "one per token");
  const bool corrected = c.vllm_importance_sampling_correction;
  std::string_view mode = c.vllm_importance_sampling_mode;
  if (corrected) {
    (void)detail::vllm_importance(c);
    if (mode.starts_with("sequence"))
      detail::refuse("vllm_importance_sampling_mode", std::string("\"") + std::string(mode) + "\"",
                     "TRL's vespo takes token modes only");
    cascade_rl::detail::require_size(sampling_log_probs.size(), n, "sampling_log_probs",
                                     "one per token");
  }
  const double clip_min = c.vllm_importance_sampling_clip_min.value_or(-detail::no_clamp);
  const double clip_max = c.vllm_importance_sampling_clip_max.value_or(detail::no_clamp);
  const double lower = std::log(1e-8);
  const auto processed_log = [&](double r) {
    const double w = mode == "token_truncate" ? std::min(std::max(r, clip_min), clip_max)
                                              : (r < clip_min || r > clip_max ? 0.0 : r);
    return std::min(std::max(std::log(w), lower), 20.0);
  };
  std::vector<T> out(n, T(0));
  for (std::size_t s = 0; s < layout.sequences(); ++s) {
    double log_w = 0;
    bool any = false;
    double advantage = 0;
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
      const bool valid = layout.valid(t);
      if (valid) {
        const double r = static_cast<double>(log_probs[t]) - static_cast<double>(old_log_probs[t]);
        log_w += std::min(std::max(r, -20.0), 20.0);
        if (!any) advantage = static_cast<double>(advantages[t]);
        any = true;
      }
      if (corrected)
        log_w += processed_log(valid ? std::exp(static_cast<double>(old_log_probs[t]) -
                                                static_cast<double>(sampling_log_probs[t]))
                                     : 1.0);
    }
    if (!any && layout.end(s) > layout.begin(s))
      advantage = static_cast<double>(advantages[layout.begin(s)]);
    log_w = std::min(std::max(log_w, lower), 20.0);
    const bool nonneg = advantage >= 0;
    const double k = nonneg ? c.vespo_k_pos : c.vespo_k_neg;
    const double lambda = std::max(nonneg ? c.vespo_lambda_pos : c.vespo_lambda_neg, 1e-4);
    double phi = std::exp(lambda + k * log_w - lambda * std::exp(log_w));
    if (!std::isfinite(phi)) phi = 0.0;
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) out[t] = static_cast<T>(phi);
  }
  return out;
}

// cispo at sequence level: min(s, epsilon_high) on every token of the row, s = exp(the mean
// of logp - old over the row's valid tokens) (a stop-gradient weight).
template <std::floating_point T>
[[nodiscard]] std::vector<T> cispo_sequence_weights(const grpo_config& c,
                                                    const token_layout& layout,
                                                    std::span<const T> log_probs,
                                                    std::span<const T> old_log_probs) {
  const std::size_t n = layout.tokens();
  cascade_rl::detail::require_size(log_probs.size(), n, "log_probs", "one per token");
  cascade_rl::detail::require_size(old_log_probs.size(), n, "old_log_probs", "one per token");
  const double cap = detail::epsilon_high_of(c);
  std::vector<T> out(n, T(0));
  for (std::size_t s = 0; s < layout.sequences(); ++s) {
    double sum = 0;
    std::size_t count = 0;
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
      if (layout.valid(t)) {
        sum += static_cast<double>(log_probs[t]) - static_cast<double>(old_log_probs[t]);
        ++count;
      }
    const double ratio = std::exp(sum / std::max(static_cast<double>(count), 1.0));
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
      out[t] = static_cast<T>(std::min(ratio, cap));
  }
  return out;
}

// use_bias_correction_kl at token level: per valid token beta * r * k3 and its gradient
// beta * r * (k3' + k3) (r = exp(logp - old), k3 of x = ref - logp without clamps), for
// aggregate_token_losses with the policy term's normaliser and aggregation(loss_type).
template <std::floating_point T>
struct kl_token_terms {
  std::vector<T> token_losses;
  std::vector<T> token_grads;
};

template <std::floating_point T>
[[nodiscard]] kl_token_terms<T> bias_corrected_kl_terms(const grpo_config& c,
                                                        const token_layout& layout,
                                                        std::span<const T> log_probs,
                                                        std::span<const T> old_log_probs,
                                                        std::span<const T> ref_log_probs) {
  detail::refuse_unsupported(c);
  const std::size_t n = layout.tokens();
  cascade_rl::detail::require_size(log_probs.size(), n, "log_probs", "one per token");
  cascade_rl::detail::require_size(old_log_probs.size(), n, "old_log_probs", "one per token");
  cascade_rl::detail::require_size(ref_log_probs.size(), n, "ref_log_probs", "one per token");
  kl_token_terms<T> out{std::vector<T>(n, T(0)), std::vector<T>(n, T(0))};
  for (std::size_t t = 0; t < n; ++t) {
    if (!layout.valid(t)) continue;
    const double logp = static_cast<double>(log_probs[t]);
    const double x = static_cast<double>(ref_log_probs[t]) - logp;
    const double k = std::exp(x) - x - 1.0;
    const double dk = -(std::exp(x) - 1.0);
    const double r = std::exp(logp - static_cast<double>(old_log_probs[t]));
    out.token_losses[t] = static_cast<T>(c.beta * r * k);
    out.token_grads[t] = static_cast<T>(c.beta * r * (dk + k));
  }
  return out;
}

}  // namespace cascade_rl::presets::trl
