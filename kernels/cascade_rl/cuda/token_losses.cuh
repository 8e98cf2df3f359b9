#pragma once
// Token losses over the ragged layout: REINFORCE (ratio and log-prob surrogates), PPO
// clip (clip-higher, dual clip), veRL's CISPO, DPPO-TV/KL, DRO, SAPO, importance truncation and the
// MOPD band mask, KL estimators as a penalty or a loss, and aggregation of caller-computed
// token losses, under every aggregation mode of the host core. The per-token terms are the
// host's (terms/, through detail/token_terms.hpp) and the sums follow the host's canonical
// order, so losses, metrics and gradients are the host's bits.
//
// Three layers, one file each: kernel/token_losses.cuh (the kernels),
// device/token_losses.cuh (CUB's shape: temporary storage, cudaError_t, the stream last)
// and this file, the throwing convenience overloads of the host algorithms.

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <span>
#include <type_traits>

#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/token_losses.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl::cuda::detail {

// Runs a token function with owned temporary storage (the result at its end), waits,
// throws what the report holds and refuses a normaliser the mode divides by when the
// batch has valid tokens (as detail::validate_normalizer of the host core).
// Term names the inputs a report may point at (Term::arguments).
template <class Term, class Run>
loss_tally run_tokens_throwing(cudaStream_t stream, loss_aggregation mode,
                               const loss_normalizer& normalizer, Run run) {
  static_assert(Term::arguments.size() <= device_report::nonfinite_arguments,
                "a term names more inputs than device_report has slots");
  cascade_rl::detail::require_normalizer_mode(mode, normalizer);
  const auto [report, tally] = run_and_report_result<loss_tally>(stream, run);
  throw_if_reported(report, Term::arguments);
  // Counts only matter when a token used them; the host core checks the same way.
  if (tally.metrics.valid_tokens > 0) cascade_rl::detail::require_normalizer_for(mode, normalizer);
  return tally;
}

inline void require_tokens(std::size_t size, const device_token_layout& layout, const char* name) {
  cascade_rl::detail::require_size(size, layout.tokens, name, "one per token");
}

template <class T>
const T* behaviour_of(std::span<const T> behaviour, const device_token_layout& layout,
                      const importance_options& importance) {
  if (importance.mode == importance_sampling::none) {
    if (!behaviour.empty()) require_tokens(behaviour.size(), layout, "behaviour_log_probs");
    return nullptr;
  }
  if (behaviour.empty() && layout.tokens > 0)
    cascade_rl::detail::fail("behaviour_log_probs", "is empty, but the importance correction needs one per token");
  require_tokens(behaviour.size(), layout, "behaviour_log_probs");
  return behaviour.data();
}

// veRL's rollout_is_weights: empty for none, else one per token.
template <class T>
const T* given_weights_of(std::span<const T> weights, const device_token_layout& layout) {
  if (weights.empty()) return nullptr;
  require_tokens(weights.size(), layout, "rollout_is_weights");
  return weights.data();
}

}  // namespace cascade_rl::cuda::detail

// ---- the throwing convenience layer -----------------------------------------------------
// Spans point to device memory; each call waits for its stream to return the loss.

namespace cascade_rl {

// The counts of one slice of a step; the layout's arrays in device memory. Waits for the
// stream.
inline loss_counts local_loss_counts(exec::cuda_policy policy, const cuda::device_token_layout& layout) {
  const auto [report, counts] = cuda::detail::run_and_report_result<loss_counts>(
      policy.stream, [&](void* temp, std::size_t& bytes, loss_counts* result) {
        return cuda::local_loss_counts(temp, bytes, layout, result, policy.stream);
      });
  cuda::detail::throw_if_reported(report, {});
  return counts;
}

template <std::floating_point T>
policy_loss_result reinforce_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                                  const reinforce_inputs<T>& inputs, std::span<T> grad_out,
                                  const loss_normalizer& normalizer,
                                  const reinforce_options& options = {}) {
  const std::span<const T> log_probs = inputs.log_probs, advantages = inputs.advantages;
  const std::span<const T> behaviour_log_probs = inputs.behaviour_log_probs;
  detail::validate_importance(options.importance, "options.importance");
  cuda::detail::require_tokens(log_probs.size(), layout, "log_probs");
  cuda::detail::require_tokens(advantages.size(), layout, "advantages");
  const T* weights = cuda::detail::given_weights_of(inputs.rollout_is_weights, layout);
  const T* behaviour = cuda::detail::behaviour_of(behaviour_log_probs, layout, options.importance);
  cuda::detail::require_tokens(grad_out.size(), layout, "grad_out");
  return cuda::detail::run_tokens_throwing<cuda::detail::reinforce_term<T>>(
      policy.stream, options.aggregation, normalizer,
      [&](void* temp, std::size_t& bytes, cuda::loss_tally* result) {
        return cuda::reinforce_loss(temp, bytes, layout, log_probs.data(), advantages.data(),
                                    behaviour, weights, grad_out.data(), normalizer, options,
                                    result, policy.stream);
      });
}

template <std::floating_point T>
policy_loss_result ppo_clip_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                                 const ppo_clip_inputs<T>& inputs, std::span<T> grad_out,
                                 const loss_normalizer& normalizer,
                                 const ppo_clip_options& options = {}) {
  const std::span<const T> log_probs = inputs.log_probs, old_log_probs = inputs.old_log_probs;
  const std::span<const T> advantages = inputs.advantages;
  const std::span<const T> behaviour_log_probs = inputs.behaviour_log_probs;
  detail::validate_ppo_options(options);
  cuda::detail::require_tokens(log_probs.size(), layout, "log_probs");
  cuda::detail::require_tokens(old_log_probs.size(), layout, "old_log_probs");
  cuda::detail::require_tokens(advantages.size(), layout, "advantages");
  const T* weights = cuda::detail::given_weights_of(inputs.rollout_is_weights, layout);
  const T* behaviour = cuda::detail::behaviour_of(behaviour_log_probs, layout, options.importance);
  cuda::detail::require_tokens(grad_out.size(), layout, "grad_out");
  return cuda::detail::run_tokens_throwing<cuda::detail::ppo_term<T>>(
      policy.stream, options.aggregation, normalizer,
      [&](void* temp, std::size_t& bytes, cuda::loss_tally* result) {
        return cuda::ppo_clip_loss(temp, bytes, layout, log_probs.data(), old_log_probs.data(),
                                   advantages.data(), behaviour, weights, grad_out.data(),
                                   normalizer, options, result, policy.stream);
      });
}

namespace detail {

// The sizes of policy_ratio_inputs, named as the host names them; returns the rollout IS
// weights (null when none).
template <std::floating_point T>
const T* checked_ratio_inputs(const cuda::device_token_layout& layout,
                              const policy_ratio_inputs<T>& inputs) {
  cuda::detail::require_tokens(inputs.log_probs.size(), layout, "log_probs");
  cuda::detail::require_tokens(inputs.old_log_probs.size(), layout, "old_log_probs");
  cuda::detail::require_tokens(inputs.advantages.size(), layout, "advantages");
  return cuda::detail::given_weights_of(inputs.rollout_is_weights, layout);
}

// The throwing layer of a loss that reads policy_ratio_inputs (its options validated
// first): the inputs' sizes, then the device layer's call call(temp, bytes, weights,
// result), weights the rollout IS weights or null.
template <std::floating_point T, class Call>
policy_loss_result run_ratio_inputs_loss(exec::cuda_policy policy,
                                         const cuda::device_token_layout& layout,
                                         const policy_ratio_inputs<T>& inputs,
                                         std::span<T> grad_out, const loss_normalizer& normalizer,
                                         loss_aggregation aggregation, Call call) {
  const T* weights = checked_ratio_inputs(layout, inputs);
  cuda::detail::require_tokens(grad_out.size(), layout, "grad_out");
  return cuda::detail::run_tokens_throwing<cuda::detail::ratio_loss_arguments>(
      policy.stream, aggregation, normalizer,
      [&](void* temp, std::size_t& bytes, cuda::loss_tally* result) {
        return call(temp, bytes, weights, result);
      });
}

}  // namespace detail

// The token-local ratio losses (CISPO, DPPO, DRO, SAPO) in one driver, the loss picked by
// the options' type, as the host's policy_ratio_loss; cispo_loss, ... below are its names.
template <std::floating_point T, detail::token_ratio_options Options>
policy_loss_result policy_ratio_loss(exec::cuda_policy policy,
                                     const cuda::device_token_layout& layout,
                                     const policy_ratio_inputs<T>& inputs, std::span<T> grad_out,
                                     const loss_normalizer& normalizer, const Options& options) {
  detail::validate_ratio_options(options);
  return detail::run_ratio_inputs_loss(
      policy, layout, inputs, grad_out, normalizer, options.aggregation,
      [&](void* temp, std::size_t& bytes, const T* weights, cuda::loss_tally* result) {
        return cuda::detail::ratio_loss(temp, bytes, layout, inputs.log_probs.data(),
                                        inputs.old_log_probs.data(), inputs.advantages.data(),
                                        weights, grad_out.data(), normalizer, options, result,
                                        policy.stream);
      });
}

template <std::floating_point T>
policy_loss_result cispo_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                              const policy_ratio_inputs<T>& inputs, std::span<T> grad_out,
                              const loss_normalizer& normalizer,
                              const cispo_options& options = {}) {
  return policy_ratio_loss(policy, layout, inputs, grad_out, normalizer, options);
}

template <std::floating_point T>
policy_loss_result dppo_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                             const policy_ratio_inputs<T>& inputs, std::span<T> grad_out,
                             const loss_normalizer& normalizer, const dppo_options& options = {}) {
  return policy_ratio_loss(policy, layout, inputs, grad_out, normalizer, options);
}

template <std::floating_point T>
policy_loss_result dro_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                            const policy_ratio_inputs<T>& inputs, std::span<T> grad_out,
                            const loss_normalizer& normalizer, const dro_options& options) {
  return policy_ratio_loss(policy, layout, inputs, grad_out, normalizer, options);
}

template <std::floating_point T>
policy_loss_result sapo_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                             const policy_ratio_inputs<T>& inputs, std::span<T> grad_out,
                             const loss_normalizer& normalizer, const sapo_options& options = {}) {
  return policy_ratio_loss(policy, layout, inputs, grad_out, normalizer, options);
}

template <std::floating_point T>
double kl_penalty(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                  const kl_inputs<T>& inputs, std::span<T> values_out,
                  std::type_identity_t<std::span<T>> grad_out, const kl_options& options = {}) {
  const std::span<const T> log_probs = inputs.log_probs, ref_log_probs = inputs.ref_log_probs;
  detail::validate_kl_options(options, "options");
  cuda::detail::require_tokens(log_probs.size(), layout, "log_probs");
  cuda::detail::require_tokens(ref_log_probs.size(), layout, "ref_log_probs");
  cuda::detail::require_tokens(values_out.size(), layout, "values_out");
  cuda::detail::require_tokens(grad_out.size(), layout, "grad_out");
  return cuda::detail::run_tokens_throwing<cuda::detail::kl_term<T>>(
             policy.stream, loss_aggregation::token_sum,
             loss_normalizer{.mode = loss_aggregation::token_sum},
             [&](void* temp, std::size_t& bytes, cuda::loss_tally* result) {
               return cuda::kl_penalty(temp, bytes, layout, log_probs.data(), ref_log_probs.data(),
                                       values_out.data(), grad_out.data(), options, result,
                                       policy.stream);
             })
      .loss;
}

template <std::floating_point T>
double kl_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
               const kl_inputs<T>& inputs, std::span<T> grad_out, const loss_normalizer& normalizer,
               const kl_loss_options& options = {}) {
  const std::span<const T> log_probs = inputs.log_probs, ref_log_probs = inputs.ref_log_probs;
  detail::validate_kl_options(options.kl, "options.kl");
  if (!std::isfinite(options.coefficient)) detail::fail("options.coefficient", "is not finite");
  cuda::detail::require_tokens(log_probs.size(), layout, "log_probs");
  cuda::detail::require_tokens(ref_log_probs.size(), layout, "ref_log_probs");
  cuda::detail::require_tokens(grad_out.size(), layout, "grad_out");
  return cuda::detail::run_tokens_throwing<cuda::detail::kl_term<T>>(
             policy.stream, options.aggregation, normalizer,
             [&](void* temp, std::size_t& bytes, cuda::loss_tally* result) {
               return cuda::kl_loss(temp, bytes, layout, log_probs.data(), ref_log_probs.data(),
                                    grad_out.data(), normalizer, options, result, policy.stream);
             })
      .loss;
}

template <std::floating_point T>
double aggregate_token_losses(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                              const token_loss_inputs<T>& inputs, std::span<T> grad_out,
                              const loss_normalizer& normalizer, loss_aggregation mode) {
  const std::span<const T> token_losses = inputs.token_losses, token_grads = inputs.token_grads;
  cuda::detail::require_tokens(token_losses.size(), layout, "token_losses");
  cuda::detail::require_tokens(token_grads.size(), layout, "token_grads");
  cuda::detail::require_tokens(grad_out.size(), layout, "grad_out");
  return cuda::detail::run_tokens_throwing<cuda::detail::aggregate_term<T>>(
             policy.stream, mode, normalizer,
             [&](void* temp, std::size_t& bytes, cuda::loss_tally* result) {
               return cuda::aggregate_token_losses(temp, bytes, layout, token_losses.data(),
                                                   token_grads.data(), grad_out.data(), normalizer,
                                                   mode, result, policy.stream);
             })
      .loss;
}

}  // namespace cascade_rl
