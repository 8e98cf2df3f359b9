#pragma once
// The per-token inputs of the losses, by name. Two spans of one type in a row are a swap
// waiting to compile (ppo_clip_loss used to take log_probs, old_log_probs in the reverse
// of veRL's order); written as designated initializers, a swap shows at the call site:
//
//   ppo_clip_loss(exec::par, layout,
//                 {.log_probs = lp, .old_log_probs = old_lp, .advantages = adv},
//                 grad, normalizer, options);
//
// Each is a plain aggregate of spans (device spans for the CUDA overloads), borrowed for
// the call: the caller keeps the data alive. The value type comes from the output range
// (core/contiguous_ranges.hpp); an input of another type does not convert.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

namespace cascade_rl {

// reinforce_loss. behaviour_log_probs (the sampler's) are read only when
// options.importance asks for a correction; empty otherwise. rollout_is_weights as for
// policy_ratio_inputs (veRL's GPG and compute_policy_loss_reinforce take them).
template <std::floating_point T>
struct reinforce_inputs {
  std::span<const T> log_probs;
  std::span<const T> advantages;
  std::span<const T> behaviour_log_probs = {};
  std::span<const T> rollout_is_weights = {};
};

// ppo_clip_loss. behaviour_log_probs as for reinforce_inputs (veRL's rollout_log_probs);
// rollout_is_weights as for policy_ratio_inputs (veRL's compute_policy_loss_vanilla and
// NeMo-RL's ClippedPGLossFn multiply the clipped token loss by them).
template <std::floating_point T>
struct ppo_clip_inputs {
  std::span<const T> log_probs;
  std::span<const T> old_log_probs;
  std::span<const T> advantages;
  std::span<const T> behaviour_log_probs = {};
  std::span<const T> rollout_is_weights = {};
};

// The losses of the ratio to the old policy from veRL's wave 2 (cispo_loss, dppo_loss, dro_loss,
// sapo_loss).
// rollout_is_weights: veRL's precomputed rollout correction weights, a stop-gradient
// factor on each token's loss (one per token); empty: none.
template <std::floating_point T>
struct policy_ratio_inputs {
  std::span<const T> log_probs;
  std::span<const T> old_log_probs;
  std::span<const T> advantages;
  std::span<const T> rollout_is_weights = {};
};

// Which tokens a covariance loss (Clip-Cov, KL-Cov) selects: see
// algorithms/covariance_losses.hpp.
struct token_selection {
  std::span<const std::size_t> tokens{};  // replay only
  std::uint64_t seed = 0;                 // seeded only
  bool replayed = false;

  [[nodiscard]] static token_selection replay(std::span<const std::size_t> tokens) {
    return {tokens, 0, true};
  }
  [[nodiscard]] static token_selection seeded(std::uint64_t seed) { return {{}, seed, false}; }
};

// The per-token inputs of any policy loss, for the entry point policy_loss
// (policy_loss_entry.hpp; one entry per token each; an input the loss does not read may be
// given or left empty).
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

// kl_penalty and kl_loss: the policy's log-probs and the reference policy's.
template <std::floating_point T>
struct kl_inputs {
  std::span<const T> log_probs;
  std::span<const T> ref_log_probs;
};

// aggregate_token_losses: a loss the caller computed per token, and its gradient with
// respect to each token's log-prob.
template <std::floating_point T>
struct token_loss_inputs {
  std::span<const T> token_losses;
  std::span<const T> token_grads;
};

// importance_weights: the ratio's target log-probs and the behaviour (sampler) log-probs,
// which importance_sampling::none does not read.
template <std::floating_point T>
struct importance_inputs {
  std::span<const T> target_log_probs;
  std::span<const T> behaviour_log_probs = {};
};

}  // namespace cascade_rl
