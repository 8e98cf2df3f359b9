#pragma once
// One entry point for every policy loss on the host executors:
//
//   policy_loss(exec::par, layout,
//               {.log_probs = lp, .old_log_probs = old_lp, .advantages = adv},
//               grad_out, normalizer, options);
//
// `options` picks the loss (ppo_clip_options, cispo_options, dppo_options, dro_options,
// sapo_options, gspo_options, geo_mean_options, clip_cov_options, kl_cov_options,
// reinforce_options), or is a variant of them such as a preset returns
// (presets::verl::policy_loss("cispo", actor), presets::trl / nemo_rl::policy_loss(config)),
// which runs as it is. Each overload is the named function of its loss (ppo_clip_loss, ...)
// on the inputs it reads: a trainer passes what it has, and a loss leaves unread what it
// does not take (REINFORCE the old log-probs; the ratio losses the behaviour log-probs,
// as REINFORCE and PPO leave them unread without an importance option). A replayed token
// selection is the one input refused where it does not apply: it asks for a selection.

#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "cascade_rl/algorithms/covariance_losses.hpp"
#include "cascade_rl/algorithms/importance_weights.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/token_layout.hpp"

namespace cascade_rl {

// The per-token inputs of any policy loss (one entry per token each; an input the loss
// does not read may be given or left empty).
//   old_log_probs        the old policy's: every loss but REINFORCE
//   behaviour_log_probs  the sampler's, for the importance option of REINFORCE and PPO
//   rollout_is_weights   precomputed correction weights on each token's loss (optional)
//   selection            Clip-Cov's token draw (seeded or replayed); KL-Cov's replay
template <std::floating_point T>
struct policy_loss_inputs {
  std::span<const T> log_probs;
  std::span<const T> old_log_probs = {};
  std::span<const T> advantages;
  std::span<const T> behaviour_log_probs = {};
  std::span<const T> rollout_is_weights = {};
  token_selection selection = token_selection::seeded(0);
};

// Whether a loss draws tokens from inputs.selection's seed (the engine gives each
// mini-batch its own seed from the stage's generator).
template <class Options>
inline constexpr bool draws_token_selection = false;
template <>
inline constexpr bool draws_token_selection<clip_cov_options> = true;

namespace detail {

// Every loss's option check under one name, its messages naming "options.<field>".
inline void validate_policy_loss_options(const reinforce_options& o) {
  validate_importance(o.importance, "options.importance");
}
inline void validate_policy_loss_options(const ppo_clip_options& o) { validate_ppo_options(o); }
inline void validate_policy_loss_options(const cispo_options& o) { validate_ratio_options(o); }
inline void validate_policy_loss_options(const dppo_options& o) { validate_ratio_options(o); }
inline void validate_policy_loss_options(const dro_options& o) { validate_ratio_options(o); }
inline void validate_policy_loss_options(const sapo_options& o) { validate_ratio_options(o); }
inline void validate_policy_loss_options(const gspo_options& o) { validate_gspo_options(o); }
inline void validate_policy_loss_options(const geo_mean_options& o) { validate_geo_mean_options(o); }
inline void validate_policy_loss_options(const clip_cov_options& o) { validate_clip_cov_options(o); }
inline void validate_policy_loss_options(const kl_cov_options& o) { validate_kl_cov_options(o); }

// The loss's name in messages: its description's (veRL's loss_mode), REINFORCE's own.
template <class Options>
constexpr std::string_view policy_loss_name() {
  if constexpr (requires { config_fields<Options>::alternative; })
    return config_fields<Options>::alternative;
  else
    return "reinforce";
}

// A replayed selection given to a loss that selects no tokens.
template <class Options>
void refuse_replay(const token_selection& selection) {
  if (selection.replayed)
    fail("inputs.selection", "replays tokens, but " + std::string(policy_loss_name<Options>()) +
                                 " selects none (only clip_cov and kl_cov do)");
}

// The inputs of the ratio-to-old-policy losses (their sampler correction is
// rollout_is_weights; the behaviour log-probs are not read).
template <class Options, class T>
policy_ratio_inputs<T> ratio_inputs_of(const policy_loss_inputs<T>& in, bool selects) {
  if (!selects) refuse_replay<Options>(in.selection);
  return {.log_probs = in.log_probs,
          .old_log_probs = in.old_log_probs,
          .advantages = in.advantages,
          .rollout_is_weights = in.rollout_is_weights};
}

}  // namespace detail

template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result policy_loss(const Policy& policy, const token_layout& layout,
                               const policy_loss_inputs<output_value_t<Out>>& inputs,
                               Out&& grad_out, const loss_normalizer& normalizer,
                               const reinforce_options& options) {
  detail::refuse_replay<reinforce_options>(inputs.selection);
  return reinforce_loss(policy, layout,
                        {.log_probs = inputs.log_probs,
                         .advantages = inputs.advantages,
                         .behaviour_log_probs = inputs.behaviour_log_probs,
                         .rollout_is_weights = inputs.rollout_is_weights},
                        grad_out, normalizer, options);
}

template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result policy_loss(const Policy& policy, const token_layout& layout,
                               const policy_loss_inputs<output_value_t<Out>>& inputs,
                               Out&& grad_out, const loss_normalizer& normalizer,
                               const ppo_clip_options& options) {
  detail::refuse_replay<ppo_clip_options>(inputs.selection);
  return ppo_clip_loss(policy, layout,
                       {.log_probs = inputs.log_probs,
                        .old_log_probs = inputs.old_log_probs,
                        .advantages = inputs.advantages,
                        .behaviour_log_probs = inputs.behaviour_log_probs,
                        .rollout_is_weights = inputs.rollout_is_weights},
                       grad_out, normalizer, options);
}

// The ratio losses (CISPO, DPPO, DRO, SAPO): one driver, picked by the options' type.
template <exec::host_policy Policy, contiguous_output Out, class Options>
  requires std::same_as<Options, cispo_options> || std::same_as<Options, dppo_options> ||
           std::same_as<Options, dro_options> || std::same_as<Options, sapo_options>
policy_loss_result policy_loss(const Policy& policy, const token_layout& layout,
                               const policy_loss_inputs<output_value_t<Out>>& inputs,
                               Out&& grad_out, const loss_normalizer& normalizer,
                               const Options& options) {
  return detail::policy_ratio_loss(policy, layout, detail::ratio_inputs_of<Options>(inputs, false),
                                   output_span(grad_out), normalizer, options);
}

template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result policy_loss(const Policy& policy, const token_layout& layout,
                               const policy_loss_inputs<output_value_t<Out>>& inputs,
                               Out&& grad_out, const loss_normalizer& normalizer,
                               const gspo_options& options) {
  return gspo_loss(policy, layout, detail::ratio_inputs_of<gspo_options>(inputs, false), grad_out,
                   normalizer, options);
}

template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result policy_loss(const Policy& policy, const token_layout& layout,
                               const policy_loss_inputs<output_value_t<Out>>& inputs,
                               Out&& grad_out, const loss_normalizer& normalizer,
                               const geo_mean_options& options) {
  return geo_mean_loss(policy, layout, detail::ratio_inputs_of<geo_mean_options>(inputs, false),
                       grad_out, normalizer, options);
}

template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result policy_loss(const Policy& policy, const token_layout& layout,
                               const policy_loss_inputs<output_value_t<Out>>& inputs,
                               Out&& grad_out, const loss_normalizer& normalizer,
                               const clip_cov_options& options) {
  return clip_cov_loss(policy, layout, detail::ratio_inputs_of<clip_cov_options>(inputs, true),
                       inputs.selection, grad_out, normalizer, options);
}

// KL-Cov selects deterministically; inputs.selection may replay veRL's tokens.
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result policy_loss(const Policy& policy, const token_layout& layout,
                               const policy_loss_inputs<output_value_t<Out>>& inputs,
                               Out&& grad_out, const loss_normalizer& normalizer,
                               const kl_cov_options& options) {
  const auto ratio_inputs = detail::ratio_inputs_of<kl_cov_options>(inputs, true);
  if (inputs.selection.replayed)
    return kl_cov_loss(policy, layout, ratio_inputs, inputs.selection, grad_out, normalizer,
                       options);
  return kl_cov_loss(policy, layout, ratio_inputs, grad_out, normalizer, options);
}

// Whether policy_loss runs a loss of these options.
template <class Options, class T = float>
concept policy_loss_options_type =
    requires(const token_layout& layout, const policy_loss_inputs<T>& inputs, std::span<T> grad,
             const loss_normalizer& normalizer, const Options& options) {
      policy_loss(exec::seq, layout, inputs, grad, normalizer, options);
    };

// A variant of loss options (a preset's result): the loss it holds.
template <exec::host_policy Policy, contiguous_output Out, class... Options>
policy_loss_result policy_loss(const Policy& policy, const token_layout& layout,
                               const policy_loss_inputs<output_value_t<Out>>& inputs,
                               Out&& grad_out, const loss_normalizer& normalizer,
                               const std::variant<Options...>& options) {
  static_assert((policy_loss_options_type<Options, output_value_t<Out>> && ...),
                "policy_loss: every alternative of the variant must be a loss's options; "
                "bypass_mode_options run through bypass_mode_loss (rollout_correction.hpp)");
  if (options.valueless_by_exception())
    detail::fail("options", "holds no loss (left empty by an exception)");
  return std::visit(
      [&](const auto& held) {
        return policy_loss(policy, layout, inputs, output_span(grad_out), normalizer, held);
      },
      options);
}

}  // namespace cascade_rl
