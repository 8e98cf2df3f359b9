#pragma once
// A policy loss's spec: what an entry point needs to run the loss from policy_loss_inputs
// on any executor (policy_loss_entry.hpp on the host, cuda/policy_loss.cuh on the GPU).
// Each loss specialises policy_loss_spec for its options type beside its host algorithm:
//
//   selection                   what inputs.selection means to it (selection_use)
//   validate(options)           its option checks, the messages naming "options.<field>"
//   run(policy, layout, inputs, grad_out, normalizer, options)
//                               its named function on that executor (the policy's), on
//                               the inputs it reads. The call is unqualified, so it finds
//                               the device layer's overloads where the device entry
//                               instantiates it.
//
// Its name in messages and configs is its options' description's (options/
// policy_losses.hpp), its token formula is in terms/, its drivers are the executors'
// (one per executor for every ratio loss). An options type without a spec is no loss.

#include <concepts>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/options/described.hpp"
#include "cascade_rl/options/loss_normalizer.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"

namespace cascade_rl {

// What a loss makes of policy_loss_inputs::selection.
enum class selection_use {
  none,        // selects no tokens: a replayed selection is refused
  drawn,       // draws its tokens from the selection's seed, or replays them (Clip-Cov)
  replayable,  // selects by its own rule; a replayed selection stands in for it (KL-Cov)
};

template <class Options>
struct policy_loss_spec;

// Whether Options is a loss's options (has a spec).
template <class Options>
concept policy_loss_options = requires(const Options& options) {
  { policy_loss_spec<Options>::selection } -> std::convertible_to<selection_use>;
  policy_loss_spec<Options>::validate(options);
};

// Whether a loss draws tokens from inputs.selection's seed (the engine gives each
// mini-batch its own seed from the stage's generator). Qualifiers do not count: the
// engine asks of decltype(a const local).
template <class Options>
  requires policy_loss_options<std::remove_cvref_t<Options>>
inline constexpr bool draws_token_selection =
    policy_loss_spec<std::remove_cvref_t<Options>>::selection == selection_use::drawn;

namespace detail {

// The loss's name in messages: its description's (veRL's loss_mode), REINFORCE's own.
template <class Options>
constexpr std::string_view policy_loss_name() {
  if constexpr (requires { config_fields<Options>::alternative; })
    return config_fields<Options>::alternative;
  else
    return "reinforce";
}

template <policy_loss_options Options>
void validate_policy_loss_options(const Options& options) {
  policy_loss_spec<Options>::validate(options);
}

// The inputs of a loss of the ratio to the old policy (its sampler correction is
// rollout_is_weights; the behaviour log-probs are not read).
template <std::floating_point T>
policy_ratio_inputs<T> ratio_inputs_of(const policy_loss_inputs<T>& in) {
  return {.log_probs = in.log_probs,
          .old_log_probs = in.old_log_probs,
          .advantages = in.advantages,
          .rollout_is_weights = in.rollout_is_weights};
}

// Every executor's entry: the selection checked against the loss's use of it, then the
// spec's run (which validates the options as the named function does).
template <policy_loss_options Options, class Policy, class Layout, std::floating_point T>
policy_loss_result run_policy_loss(const Policy& policy, const Layout& layout,
                                   const policy_loss_inputs<T>& inputs, std::span<T> grad_out,
                                   const loss_normalizer& normalizer, const Options& options) {
  if (policy_loss_spec<Options>::selection == selection_use::none && inputs.selection.replayed)
    fail("inputs.selection", "replays tokens, but " + std::string(policy_loss_name<Options>()) +
                                 " selects none (only clip_cov and kl_cov do)");
  return policy_loss_spec<Options>::run(policy, layout, inputs, grad_out, normalizer, options);
}

}  // namespace detail

}  // namespace cascade_rl
