#pragma once
// One entry point for every policy loss on the GPU, as the host's (policy_loss_entry.hpp):
//
//   policy_loss(exec::cuda{stream}, device_layout,
//               {.log_probs = lp, .old_log_probs = old_lp, .advantages = adv},
//               grad_out, normalizer, options);
//
// Spans point to device memory; the call waits for its stream. `options` is any loss's
// options or a variant of them (a preset's result, through the host header's variant
// overload). The loss's spec (algorithms/policy_loss_spec.hpp) runs its named function of
// this layer on the inputs it reads; Clip-Cov's seeded draw and KL-Cov's own selection are
// made into a device mask of the call's, a replayed selection (host indices) copied there.
// Same losses, metrics and gradients as the host entry: the named functions' bits.

#include <concepts>
#include <span>

#include "cascade_rl/algorithms/policy_loss_entry.hpp"
#include "cascade_rl/algorithms/policy_loss_spec.hpp"
#include "cascade_rl/cuda/covariance_losses.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/policy.hpp"
#include "cascade_rl/cuda/sequence_ratio_losses.cuh"
#include "cascade_rl/cuda/token_losses.cuh"

namespace cascade_rl {

template <std::floating_point T, policy_loss_options Options>
policy_loss_result policy_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                               const policy_loss_inputs<T>& inputs, std::span<T> grad_out,
                               const loss_normalizer& normalizer, const Options& options) {
  return detail::run_policy_loss(policy, layout, inputs, grad_out, normalizer, options);
}

}  // namespace cascade_rl
