#pragma once
// veRL's bypass mode on the GPU: bypass_mode_loss of algorithms/rollout_correction.hpp
// composed of the device pieces, each the host's bits, so the composition is too. The
// rollout correction (rollout_correction.cuh) writes the weights and keep bytes; the loss
// (token_losses.cuh) runs on the same sequences with keep_out as their mask: ppo_clip_loss
// with old = rollout log-probs and no weights, or reinforce_loss with the correction's
// weights. REINFORCE's approx_kl (veRL's ppo_kl, the plain masked sum of rollout_logp -
// logp) is kl_penalty's k1 sum of (rollout_logp, logp) over that mask: the host's
// canonical sum of the same terms. Spans point to device memory; the call waits for its
// stream. The refusals are the host's, in its order (arguments by name, inputs by name and
// first index).

#include <cuda_runtime.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "cascade_rl/algorithms/rollout_correction.hpp"
#include "cascade_rl/cuda/rollout_correction.cuh"
#include "cascade_rl/cuda/token_losses.cuh"

namespace cascade_rl {

// bypass_mode_loss on device memory, in the host's argument order. `normalizer` is a
// loss_normalizer, or a function of the effective device layout (the call's sequences,
// keep_out as mask) returning one: e.g. [&](const cuda::device_token_layout& l) { return
// local_loss_counts(policy, l).normalizer(mode, T); } for veRL's single-rank agg_loss.
// is_weights_out may be empty when no IS level is set.
template <std::floating_point T, class Normalizer>
bypass_mode_result bypass_mode_loss(exec::cuda_policy policy,
                                    const cuda::device_token_layout& layout,
                                    const bypass_mode_inputs<T>& inputs, std::span<T> grad_out,
                                    const Normalizer& normalizer,
                                    const bypass_mode_options& options,
                                    std::type_identity_t<std::span<T>> is_weights_out,
                                    std::span<std::uint8_t> keep_out) {
  if (options.ppo.importance.mode != importance_sampling::none)
    detail::fail("options.ppo.importance",
                 "must be none: the bypass mode's ratio is already the correction");
  if (options.reinforce.importance.mode != importance_sampling::none)
    detail::fail("options.reinforce.importance",
                 "must be none: the bypass mode's IS weights are the correction's");
  cuda::detail::require_tokens(inputs.advantages.size(), layout, "advantages");
  bypass_mode_result result;
  result.correction = rollout_correction(
      policy, layout, rollout_correction_inputs<T>{inputs.log_probs, inputs.rollout_log_probs},
      is_weights_out, keep_out, options.correction);
  const cuda::device_token_layout effective{layout.offsets, keep_out.data(), layout.sequences,
                                            layout.tokens};
  loss_normalizer norm;
  if constexpr (std::is_same_v<Normalizer, loss_normalizer>)
    norm = normalizer;
  else
    norm = normalizer(effective);
  policy_loss_result loss;
  if (options.loss == bypass_loss::ppo_clip) {
    loss = ppo_clip_loss(policy, effective,
                         ppo_clip_inputs<T>{.log_probs = inputs.log_probs,
                                            .old_log_probs = inputs.rollout_log_probs,
                                            .advantages = inputs.advantages},
                         grad_out, norm, options.ppo);
  } else {
    const bool weighted = options.correction.is_level != rollout_is_level::none;
    loss = reinforce_loss(
        policy, effective,
        reinforce_inputs<T>{.log_probs = inputs.log_probs,
                            .advantages = inputs.advantages,
                            .rollout_is_weights = weighted ? std::span<const T>(is_weights_out)
                                                           : std::span<const T>{}},
        grad_out, norm, options.reinforce);
    // k1 = rollout_logp - logp per kept token, summed in the canonical order; its values
    // and gradient go to scratch.
    cuda::detail::device_buffer scratch(2 * layout.tokens * sizeof(T), policy.stream);
    T* const values = static_cast<T*>(scratch.data());
    loss.metrics.approx_kl_sum = kl_penalty(
        policy, effective,
        kl_inputs<T>{.log_probs = inputs.rollout_log_probs, .ref_log_probs = inputs.log_probs},
        std::span<T>(values, layout.tokens), std::span<T>(values + layout.tokens, layout.tokens),
        kl_options{.estimator = kl_estimator::k1});
  }
  result.loss = loss.loss;
  result.metrics = loss.metrics;
  return result;
}

}  // namespace cascade_rl
