#pragma once
// veRL's covariance-selection losses (Clip-Cov, KL-Cov) on the GPU, the throwing convenience layer
// over device/covariance_losses.cuh (kernel/ the kernels, device/ CUB's shape). Spans point
// to device memory; each call waits for its stream.
//
//   clip_cov_seeded_selection  our seeded draw (token_selection::seeded of the host core:
//                              the same tokens) into a selection mask, one byte per token;
//   clip_cov_loss              the loss over a selection mask (the host's bits for the same
//                              selection). To replay a list of tokens (e.g. veRL's draw),
//                              write 1 at those tokens of a zeroed mask; a mask that selects
//                              a token the layout leaves out is refused, naming the token,
//                              as the host core refuses such a replayed token.
//   kl_cov_selection           KL-Cov's top-covariance selection (kl_cov_selection of the
//                              host core: the same tokens) into a selection mask;
//   kl_cov_loss                KL-Cov over a selection mask (the host's bits for the same
//                              selection; replay a list as for Clip-Cov).
//
// The selection is over the tokens of one call: not partition-invariant (see
// algorithms/covariance_losses.hpp).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/covariance_losses.hpp"
#include "cascade_rl/cuda/device/covariance_losses.cuh"
#include "cascade_rl/cuda/token_losses.cuh"

namespace cascade_rl {

namespace detail {

// A selection's run: `select(temp, bytes)` is the device layer's selection call.
template <class Select>
void run_covariance_selection(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                              std::span<const std::uint8_t> selected_out, Select select) {
  cuda::detail::require_tokens(selected_out.size(), layout, "selected_out");
  cuda::detail::throw_if_reported(cuda::detail::run_and_report(policy.stream, select), {});
}

// A selected token the layout's mask leaves out (the device finds the lowest) is refused.
// A mask replayed from `replayed` (token_selection::tokens; empty: a caller's mask) is
// named as the host names it, "selection.tokens[k]" for the first entry in replay order
// holding such a token: on that error path the mask comes back and the host's own check
// names it. A caller's mask is named "selected[t]".
inline void refuse_masked_selection(exec::cuda_policy policy,
                                    const cuda::device_token_layout& layout,
                                    std::span<const std::uint8_t> selected,
                                    std::span<const std::size_t> replayed) {
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::check_selection_mask(temp, bytes, layout, selected.data(), policy.stream);
      });
  if (report.first_refused == cuda::device_report::none) return;
  const std::size_t t = static_cast<std::size_t>(report.first_refused);
  if (replayed.empty())
    fail_at("selected", t, "selects token " + std::to_string(t) + ", which the mask leaves out");
  std::vector<std::uint8_t> valid(layout.tokens);
  cuda::check(cudaMemcpyAsync(valid.data(), layout.mask, valid.size(), cudaMemcpyDeviceToHost,
                              policy.stream),
              "cudaMemcpyAsync");
  cuda::check(cudaStreamSynchronize(policy.stream), "cudaStreamSynchronize");
  (void)replayed_selection_mask(layout.tokens, replayed,
                                [&](std::size_t u) { return valid[u] != 0; });
}

// What both losses over a selection mask check and run (the options are validated by the
// caller): the inputs' sizes, the mask against the layout (refuse_masked_selection;
// `replayed`: the tokens the mask was replayed from, or empty), then `run(temp, bytes,
// rollout_is_weights, result)`, the device layer's loss call.
template <class T, class Run>
policy_loss_result run_covariance_loss(exec::cuda_policy policy,
                                       const cuda::device_token_layout& layout,
                                       const policy_ratio_inputs<T>& inputs,
                                       std::span<const std::uint8_t> selected,
                                       std::span<const std::size_t> replayed,
                                       std::span<T> grad_out, const loss_normalizer& normalizer,
                                       loss_aggregation aggregation, Run run) {
  const T* weights = checked_ratio_inputs(layout, inputs);
  cuda::detail::require_tokens(selected.size(), layout, "selected");
  cuda::detail::require_tokens(grad_out.size(), layout, "grad_out");
  refuse_masked_selection(policy, layout, selected, replayed);
  return cuda::detail::run_tokens_throwing<cuda::detail::ratio_loss_arguments>(
      policy.stream, aggregation, normalizer,
      [&](void* temp, std::size_t& bytes, cuda::loss_tally* result) {
        return run(temp, bytes, weights, result);
      });
}

// A selection mask in device memory for one call: `tokens` replayed into it (checked on
// the host for range and repeats; against the layout's mask, which is in device memory,
// by run_covariance_loss), else left for the caller's selection kernel to write.
class device_selection {
 public:
  device_selection(exec::cuda_policy policy, const cuda::device_token_layout& layout)
      : buffer_(layout.tokens, policy.stream),
        mask_(static_cast<std::uint8_t*>(buffer_.data()), layout.tokens) {}
  device_selection(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                   std::span<const std::size_t> tokens)
      : device_selection(policy, layout) {
    replayed_ = replayed_selection_mask(layout.tokens, tokens, [](std::size_t) { return true; });
    cuda::check(cudaMemcpyAsync(mask_.data(), replayed_.data(), replayed_.size(),
                                cudaMemcpyHostToDevice, policy.stream),
                "cudaMemcpyAsync");
  }
  [[nodiscard]] std::span<std::uint8_t> mask() const { return mask_; }

 private:
  cuda::detail::device_buffer buffer_;
  std::span<std::uint8_t> mask_;
  std::vector<std::uint8_t> replayed_;  // the copy's source, alive until the stream read it
};

}  // namespace detail

template <std::floating_point T>
void clip_cov_seeded_selection(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                               const policy_ratio_inputs<T>& inputs, std::uint64_t seed,
                               std::span<std::uint8_t> selected_out,
                               const clip_cov_options& options = {}) {
  detail::validate_clip_cov_options(options);
  cuda::detail::require_tokens(inputs.log_probs.size(), layout, "log_probs");
  cuda::detail::require_tokens(inputs.old_log_probs.size(), layout, "old_log_probs");
  cuda::detail::require_tokens(inputs.advantages.size(), layout, "advantages");
  detail::run_covariance_selection(
      policy, layout, selected_out, [&](void* temp, std::size_t& bytes) {
        return cuda::clip_cov_seeded_selection(
            temp, bytes, layout, inputs.log_probs.data(), inputs.old_log_probs.data(),
            inputs.advantages.data(), seed, options, selected_out.data(), policy.stream);
      });
}

namespace detail {

// Clip-Cov over a mask (replayed: the tokens it was replayed from, or empty).
template <std::floating_point T>
policy_loss_result clip_cov_loss_on_mask(exec::cuda_policy policy,
                                         const cuda::device_token_layout& layout,
                                         const policy_ratio_inputs<T>& inputs,
                                         std::span<const std::uint8_t> selected,
                                         std::span<const std::size_t> replayed,
                                         std::span<T> grad_out, const loss_normalizer& normalizer,
                                         const clip_cov_options& options) {
  validate_clip_cov_options(options);
  return run_covariance_loss(
      policy, layout, inputs, selected, replayed, grad_out, normalizer, options.aggregation,
      [&](void* temp, std::size_t& bytes, const T* weights, cuda::loss_tally* result) {
        return cuda::clip_cov_loss(temp, bytes, layout, inputs.log_probs.data(),
                                   inputs.old_log_probs.data(), inputs.advantages.data(), weights,
                                   selected.data(), grad_out.data(), normalizer, options, result,
                                   policy.stream);
      });
}

}  // namespace detail

// Clip-Cov with the selection mask `selected` (one byte per token, device memory).
template <std::floating_point T>
policy_loss_result clip_cov_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                                 const policy_ratio_inputs<T>& inputs,
                                 std::span<const std::uint8_t> selected, std::span<T> grad_out,
                                 const loss_normalizer& normalizer,
                                 const clip_cov_options& options = {}) {
  return detail::clip_cov_loss_on_mask(policy, layout, inputs, selected, {}, grad_out,
                                       normalizer, options);
}

// Clip-Cov with a token_selection, as the host's overload: our seeded draw
// (clip_cov_seeded_selection) or the replayed tokens, into a mask of this call's.
template <std::floating_point T>
policy_loss_result clip_cov_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                                 const policy_ratio_inputs<T>& inputs,
                                 const token_selection& selection, std::span<T> grad_out,
                                 const loss_normalizer& normalizer,
                                 const clip_cov_options& options = {}) {
  detail::validate_clip_cov_options(options);
  if (selection.replayed) {
    const detail::device_selection replayed(policy, layout, selection.tokens);
    return detail::clip_cov_loss_on_mask(policy, layout, inputs,
                                         std::span<const std::uint8_t>(replayed.mask()),
                                         selection.tokens, grad_out, normalizer, options);
  }
  const detail::device_selection drawn(policy, layout);
  clip_cov_seeded_selection(policy, layout, inputs, selection.seed, drawn.mask(), options);
  return clip_cov_loss(policy, layout, inputs, std::span<const std::uint8_t>(drawn.mask()),
                       grad_out, normalizer, options);
}

template <std::floating_point T>
void kl_cov_selection(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                      const policy_ratio_inputs<T>& inputs, std::span<std::uint8_t> selected_out,
                      const kl_cov_options& options = {}) {
  detail::validate_kl_cov_options(options);
  cuda::detail::require_tokens(inputs.log_probs.size(), layout, "log_probs");
  cuda::detail::require_tokens(inputs.advantages.size(), layout, "advantages");
  detail::run_covariance_selection(
      policy, layout, selected_out, [&](void* temp, std::size_t& bytes) {
        return cuda::kl_cov_selection(temp, bytes, layout, inputs.log_probs.data(),
                                      inputs.advantages.data(), options, selected_out.data(),
                                      policy.stream);
      });
}

namespace detail {

// KL-Cov over a mask (replayed: the tokens it was replayed from, or empty).
template <std::floating_point T>
policy_loss_result kl_cov_loss_on_mask(exec::cuda_policy policy,
                                       const cuda::device_token_layout& layout,
                                       const policy_ratio_inputs<T>& inputs,
                                       std::span<const std::uint8_t> selected,
                                       std::span<const std::size_t> replayed,
                                       std::span<T> grad_out, const loss_normalizer& normalizer,
                                       const kl_cov_options& options) {
  validate_kl_cov_options(options);
  return run_covariance_loss(
      policy, layout, inputs, selected, replayed, grad_out, normalizer, options.aggregation,
      [&](void* temp, std::size_t& bytes, const T* weights, cuda::loss_tally* result) {
        return cuda::kl_cov_loss(temp, bytes, layout, inputs.log_probs.data(),
                                 inputs.old_log_probs.data(), inputs.advantages.data(), weights,
                                 selected.data(), grad_out.data(), normalizer, options, result,
                                 policy.stream);
      });
}

}  // namespace detail

// KL-Cov with the selection mask `selected` (one byte per token, device memory).
template <std::floating_point T>
policy_loss_result kl_cov_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                               const policy_ratio_inputs<T>& inputs,
                               std::span<const std::uint8_t> selected, std::span<T> grad_out,
                               const loss_normalizer& normalizer,
                               const kl_cov_options& options = {}) {
  return detail::kl_cov_loss_on_mask(policy, layout, inputs, selected, {}, grad_out, normalizer,
                                     options);
}

// KL-Cov with replayed tokens (token_selection::replay; a seeded selection is refused, as
// on the host), or by its own rule (kl_cov_selection) in the overload without one.
template <std::floating_point T>
policy_loss_result kl_cov_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                               const policy_ratio_inputs<T>& inputs,
                               const token_selection& selection, std::span<T> grad_out,
                               const loss_normalizer& normalizer,
                               const kl_cov_options& options = {}) {
  detail::validate_kl_cov_options(options);
  detail::require_replayed_kl_cov(selection);
  const detail::device_selection replayed(policy, layout, selection.tokens);
  return detail::kl_cov_loss_on_mask(policy, layout, inputs,
                                     std::span<const std::uint8_t>(replayed.mask()),
                                     selection.tokens, grad_out, normalizer, options);
}

template <std::floating_point T>
policy_loss_result kl_cov_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                               const policy_ratio_inputs<T>& inputs, std::span<T> grad_out,
                               const loss_normalizer& normalizer,
                               const kl_cov_options& options = {}) {
  const detail::device_selection selected(policy, layout);
  kl_cov_selection(policy, layout, inputs, selected.mask(), options);
  return kl_cov_loss(policy, layout, inputs, std::span<const std::uint8_t>(selected.mask()),
                     grad_out, normalizer, options);
}

}  // namespace cascade_rl
