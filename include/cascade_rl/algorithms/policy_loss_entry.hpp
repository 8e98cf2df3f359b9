#pragma once
// One entry point for every policy loss on the host executors:
//
//   policy_loss(exec::par, layout,
//               {.log_probs = lp, .old_log_probs = old_lp, .advantages = adv},
//               grad_out, normalizer, options);
//
// `options` picks the loss (ppo_clip_options, cispo_options, dppo_options, dro_options,
// sapo_options, gspo_options, geo_mean_options, clip_cov_options, kl_cov_options,
// reinforce_options: every type with a policy_loss_spec), or is a variant of them such as
// a preset returns (presets::verl::policy_loss("cispo", actor), presets::trl /
// nemo_rl::policy_loss(config)), which runs as it is. The loss's spec
// (policy_loss_spec.hpp, beside each loss) runs its named function (ppo_clip_loss, ...) on
// the inputs it reads: a trainer passes what it has, and a loss leaves unread what it does
// not take (REINFORCE the old log-probs; the ratio losses the behaviour log-probs, as
// REINFORCE and PPO leave them unread without an importance option). A replayed token
// selection is the one input refused where it does not apply: it asks for a selection.
// The device's entry is cuda/policy_loss.cuh, on the same specs.

#include <span>
#include <variant>

#include "cascade_rl/algorithms/covariance_losses.hpp"
#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/policy_loss_spec.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/token_layout.hpp"

namespace cascade_rl {

template <exec::host_policy Policy, contiguous_output Out, policy_loss_options Options>
policy_loss_result policy_loss(const Policy& policy, const token_layout& layout,
                               const policy_loss_inputs<output_value_t<Out>>& inputs,
                               Out&& grad_out, const loss_normalizer& normalizer,
                               const Options& options) {
  return detail::run_policy_loss(policy, layout, inputs, output_span(grad_out), normalizer,
                                 options);
}

// A variant of loss options (a preset's result): the loss it holds, on any executor (the
// device's entry is found where the call is instantiated).
template <class Policy, class Layout, contiguous_output Out, class... Options>
policy_loss_result policy_loss(const Policy& policy, const Layout& layout,
                               const policy_loss_inputs<output_value_t<Out>>& inputs,
                               Out&& grad_out, const loss_normalizer& normalizer,
                               const std::variant<Options...>& options) {
  static_assert((policy_loss_options<Options> && ...),
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
