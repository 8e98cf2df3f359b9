#pragma once
// The sequence-level ratio losses (algorithms/sequence_ratio_losses.hpp of the host core)
// on the device: GSPO, GMPO and sequence SAPO. A pre-pass kernel computes each sequence's
// quantity (its mean log-ratio, its loss, its ratio and gradient) in the host's order, then
// the token losses' kernels run the host's token term in the canonical order, so losses,
// metrics and gradients are the host's bits.
//
// Three layers, one file each: kernel/sequence_ratio_losses.cuh (the pre-pass kernel),
// device/sequence_ratio_losses.cuh (CUB's shape: temporary storage, cudaError_t, the
// stream last) and this file, the throwing convenience overload of the host algorithm.

#include <cuda_runtime.h>

#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/sequence_ratio_losses.cuh"
#include "cascade_rl/cuda/policy.hpp"
#include "cascade_rl/cuda/token_losses.cuh"

namespace cascade_rl {

// Spans point to device memory; the call waits for its stream to return the loss.
template <std::floating_point T>
policy_loss_result gspo_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                             const policy_ratio_inputs<T>& inputs, std::span<T> grad_out,
                             const loss_normalizer& normalizer, const gspo_options& options = {}) {
  detail::validate_gspo_options(options);
  return detail::run_ratio_inputs_loss(
      policy, layout, inputs, grad_out, normalizer, options.aggregation,
      [&](void* temp, std::size_t& bytes, const T* weights, cuda::loss_tally* result) {
        return cuda::gspo_loss(temp, bytes, layout, inputs.log_probs.data(),
                               inputs.old_log_probs.data(), inputs.advantages.data(), weights,
                               grad_out.data(), normalizer, options, result, policy.stream);
      });
}

template <std::floating_point T>
policy_loss_result geo_mean_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                                 const policy_ratio_inputs<T>& inputs, std::span<T> grad_out,
                                 const loss_normalizer& normalizer,
                                 const geo_mean_options& options = {}) {
  detail::validate_geo_mean_options(options);
  return detail::run_ratio_inputs_loss(
      policy, layout, inputs, grad_out, normalizer, options.aggregation,
      [&](void* temp, std::size_t& bytes, const T* weights, cuda::loss_tally* result) {
        return cuda::geo_mean_loss(temp, bytes, layout, inputs.log_probs.data(),
                                   inputs.old_log_probs.data(), inputs.advantages.data(), weights,
                                   grad_out.data(), normalizer, options, result, policy.stream);
      });
}

// No rollout IS weights (refused, as on the host).
template <std::floating_point T>
policy_loss_result sequence_sapo_loss(exec::cuda_policy policy,
                                      const cuda::device_token_layout& layout,
                                      const policy_ratio_inputs<T>& inputs, std::span<T> grad_out,
                                      const loss_normalizer& normalizer,
                                      const sequence_sapo_options& options = {}) {
  detail::validate_sequence_sapo(options, inputs.rollout_is_weights.size());
  return detail::run_ratio_inputs_loss(
      policy, layout, inputs, grad_out, normalizer, options.aggregation,
      [&](void* temp, std::size_t& bytes, const T*, cuda::loss_tally* result) {
        return cuda::sequence_sapo_loss(temp, bytes, layout, inputs.log_probs.data(),
                                        inputs.old_log_probs.data(), inputs.advantages.data(),
                                        grad_out.data(), normalizer, options, result,
                                        policy.stream);
      });
}

}  // namespace cascade_rl
