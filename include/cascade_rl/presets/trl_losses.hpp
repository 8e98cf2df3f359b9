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
//   sapo     grpo's aggregation, the soft gate sigmoid(tau (r - 1)) * 4 / tau; at sequence
//            level r is the row's ratio (the mean log-ratio over its valid tokens):
//            sequence_sapo_options (sequence_sapo_loss; the row's ratio's gradient lands
//            on each valid token as the row's summed d/dr times r / its valid count,
//            exact since every TRL aggregation weight is constant within a row);
//   luspo    (per-token loss * the row's valid tokens L).mean() over the (rows, T) grid,
//            / steps: seq-mean-token-sum with sequences = rows * steps. At sequence level
//            the loss is one per row; at token level (and the KL under beta, at either
//            level) TRL's mean runs over every position of the grid, padding included:
//            the loss over policy_layout / kl_layout (every position valid) with the
//            weight L / T on each position of the row (luspo_weights, the PPO clip's
//            rollout_is_weights; inside kl_token_terms for the KL);
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
// term: kl_loss with presets::trl::kl_loss's options and the same normaliser; where no
// kl_options expresses TRL's term (use_bias_correction_kl, luspo) kl_token_terms gives its
// per-token values and gradients for aggregate_token_losses over kl_layout.
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
// use_bias_correction_kl: beta * r * k3 with the ratio r not detached: at token level
// r = exp(logp - old), gradient beta * r * (k3' + k3); at sequence level the row's ratio
// s, gradient beta * s * (k3' + the row's mean k3) (s moves with every valid token of the
// row; exact for the same reason as sapo's): kl_token_terms.
//
// Conventions with no cascade_rl expression are refused by name (policy_loss throws
// cascade_rl::error naming the GRPOConfig field): delta with sequence level; the vLLM
// correction at sequence level, with cispo or sapo (TRL's ratio on them would be
// precomputed weights), and with luspo at token level (TRL's ratio on the padded
// positions, 1 clamped or masked, has no vector to check it against).

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

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/token_loss_terms.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/kl.hpp"
#include "cascade_rl/options/loss_normalizer.hpp"
#include "cascade_rl/options/policy_losses.hpp"

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

using policy_loss_options = std::variant<ppo_clip_options, gspo_options, cispo_options,
                                         sapo_options, sequence_sapo_options, reinforce_options>;

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
}

// luspo at token level: TRL's mean over the grid reads the padded positions' loss too.
inline bool luspo_over_positions(const grpo_config& c) {
  return c.loss_type == "luspo" && !is_sequence_level(c);
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
    if (importance.mode != importance_sampling::none)
      detail::refuse("vllm_importance_sampling_correction", "true",
                     "sapo takes the correction as precomputed rollout_is_weights");
    // The gate of the row's ratio.
    if (sequence)
      return sequence_sapo_options{.tau_pos = c.sapo_temperature_pos,
                                   .tau_neg = c.sapo_temperature_neg,
                                   .aggregation = mode};
    return sapo_options{.tau_pos = c.sapo_temperature_pos,
                        .tau_neg = c.sapo_temperature_neg,
                        .log_ratio_clamp = detail::no_clamp,
                        .aggregation = mode};
  }
  if (detail::luspo_over_positions(c) && importance.mode != importance_sampling::none)
    detail::refuse("vllm_importance_sampling_correction", "true",
                   "luspo at token level reads TRL's ratio on the padded positions too: not "
                   "supported");
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
                   "kl_token_terms with aggregate_token_losses");
  if (c.loss_type == "luspo")
    detail::refuse("loss_type", "\"luspo\"",
                   "luspo weighs the KL of every position by its row's valid count: use "
                   "kl_token_terms with aggregate_token_losses over kl_layout");
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

// The layout TRL's policy loss reads: every position of each row for luspo at token level
// (TRL's mean runs over the padded grid), else `layout` itself. A view of layout's offsets.
[[nodiscard]] inline token_layout policy_layout(const grpo_config& c, const token_layout& layout) {
  return detail::luspo_over_positions(c) ? layout.with_mask({}) : layout;
}

// The layout TRL's KL term reads: every position for luspo with beta != 0 (at either level
// the KL is per position and luspo's mean runs over the grid), else `layout`.
[[nodiscard]] inline token_layout kl_layout(const grpo_config& c, const token_layout& layout) {
  return c.loss_type == "luspo" && c.beta != 0.0 ? layout.with_mask({}) : layout;
}

namespace detail {

// luspo's weight on every position of a row: its valid count over its length (TRL's
// per-token loss * L, averaged over T positions instead of summed).
inline double luspo_position_weight(const token_layout& layout, std::size_t s) {
  const std::size_t length = layout.length(s);
  return length == 0 ? 0.0
                     : static_cast<double>(layout.valid_tokens(s)) / static_cast<double>(length);
}

}  // namespace detail

// luspo at token level: L / T on every position of each row (see the header), the PPO
// clip's rollout_is_weights over policy_layout(c, layout); empty otherwise. `layout` is
// the batch's own (its mask gives L).
template <std::floating_point T>
[[nodiscard]] std::vector<T> luspo_weights(const grpo_config& c, const token_layout& layout) {
  if (!detail::luspo_over_positions(c)) return {};
  std::vector<T> out(layout.tokens(), T(0));
  for (std::size_t s = 0; s < layout.sequences(); ++s) {
    const T w = static_cast<T>(detail::luspo_position_weight(layout, s));
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) out[t] = w;
  }
  return out;
}

// The KL term beta * w * r * k3, k3 of x = ref - logp without clamps, per token, for
// aggregate_token_losses over kl_layout(c, layout) with the policy term's normaliser and
// aggregation(loss_type); empty when beta is 0. r is 1, or under use_bias_correction_kl
// the differentiated ratio: exp(logp - old) per token, or at sequence level the row's
// s = exp(mean over its valid tokens of logp - old), whose gradient adds s times the row's
// summed k3 / its valid count on each valid token. w is 1, or for luspo L / T on every
// position (padding included). old_log_probs are read only under use_bias_correction_kl.
template <std::floating_point T>
[[nodiscard]] token_loss_terms<T> kl_token_terms(const grpo_config& c, const token_layout& layout,
                                                 std::span<const T> log_probs,
                                                 std::span<const T> old_log_probs,
                                                 std::span<const T> ref_log_probs) {
  if (c.beta == 0.0) return {};
  detail::refuse_unsupported(c);
  (void)aggregation(c.loss_type);  // refuses an unknown loss_type
  const bool sequence = detail::is_sequence_level(c);
  const bool corrected = c.use_bias_correction_kl;
  const bool luspo = c.loss_type == "luspo";
  const std::size_t n = layout.tokens();
  cascade_rl::detail::require_size(log_probs.size(), n, "log_probs", "one per token");
  if (corrected)
    cascade_rl::detail::require_size(old_log_probs.size(), n, "old_log_probs", "one per token");
  cascade_rl::detail::require_size(ref_log_probs.size(), n, "ref_log_probs", "one per token");
  token_loss_terms<T> out{std::vector<T>(n, T(0)), std::vector<T>(n, T(0))};
  for (std::size_t s = 0; s < layout.sequences(); ++s) {
    const std::size_t valid = layout.valid_tokens(s);
    const double w = luspo ? detail::luspo_position_weight(layout, s) : 1.0;
    double row_ratio = 1.0;  // the row's s (sequence level, corrected)
    if (corrected && sequence) {
      double sum = 0;
      for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
        if (layout.valid(t))
          sum += static_cast<double>(log_probs[t]) - static_cast<double>(old_log_probs[t]);
      row_ratio = std::exp(sum / std::max(static_cast<double>(valid), 1.0));
    }
    double k_sum = 0;  // the row's k3 over the positions in the loss
    std::vector<double> grads(layout.length(s), 0.0);
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
      if (!luspo && !layout.valid(t)) continue;
      const double logp = static_cast<double>(log_probs[t]);
      const double x = static_cast<double>(ref_log_probs[t]) - logp;
      const double k = std::exp(x) - x - 1.0;
      const double dk = -(std::exp(x) - 1.0);
      double value = k, grad = dk;
      if (corrected && !sequence) {
        const double r = std::exp(logp - static_cast<double>(old_log_probs[t]));
        value = r * k;
        grad = r * (dk + k);
      } else if (corrected) {
        value = row_ratio * k;
        grad = row_ratio * dk;
        k_sum += k;
      }
      out.token_losses[t] = static_cast<T>(c.beta * w * value);
      grads[t - layout.begin(s)] = grad;
    }
    const double coupling =
        corrected && sequence ? row_ratio * k_sum / std::max(static_cast<double>(valid), 1.0) : 0.0;
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
      const double g = grads[t - layout.begin(s)] + (layout.valid(t) ? coupling : 0.0);
      out.token_grads[t] = static_cast<T>(c.beta * w * g);
    }
  }
  return out;
}

}  // namespace cascade_rl::presets::trl
