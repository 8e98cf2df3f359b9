#pragma once
// Log-probabilities of the sampled tokens and the entropy of each row's softmax, from
// logits [rows, vocab] (fp32 or bf16) in one pass: the online log-sum-exp of
// terms/log_sum_exp.hpp in its canonical order, so the results are the host's bits.
//
// Three layers, one file each: kernel/log_probs.cuh (the kernel), device/log_probs.cuh
// (CUB's shape: temporary storage, cudaError_t, the stream last) and this file, the
// throwing convenience overload of the host algorithm.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "cascade_rl/algorithms/log_probs_backward.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/logits_layout.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/log_probs.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl {

// The throwing convenience overload; spans in device memory. entropy may be empty.
template <class T>
void log_probs_from_logits(exec::cuda_policy policy, const logits_layout& layout,
                           std::span<const T> logits, std::span<const std::int64_t> labels,
                           std::span<float> log_probs, std::span<float> entropy = {},
                           float temperature = 1.0f) {
  const std::size_t vocab = layout.vocab;
  const std::size_t row_stride = layout.stride();
  const std::size_t rows = labels.size();
  if (vocab == 0) detail::fail("vocab", "is 0, expected at least 1");
  if (row_stride < vocab) detail::fail("row_stride", "is smaller than vocab");
  if (!(temperature > 0)) detail::fail("temperature", "must be > 0");
  if (rows > 0 && logits.size() < (rows - 1) * row_stride + vocab)
    detail::fail("logits", "has " + std::to_string(logits.size()) + " entries, too few for " +
                               std::to_string(rows) + " rows of stride " + std::to_string(row_stride));
  detail::require_size(log_probs.size(), rows, "log_probs", "one per label");
  if (!entropy.empty()) detail::require_size(entropy.size(), rows, "entropy", "one per label, or empty");
  cuda::detail::throw_if_reported(
      cuda::detail::run_and_report(policy.stream,
                                   [&](void* temp, std::size_t& bytes) {
                                     return cuda::log_probs_from_logits(
                                         temp, bytes, logits.data(), rows, vocab, row_stride, labels.data(),
                                         log_probs.data(), entropy.empty() ? nullptr : entropy.data(),
                                         temperature, policy.stream);
                                   }),
      {});
}

// The backward pass (log_probs_backward.hpp of the host core); spans in device memory,
// seeds.entropy may be empty.
template <class T>
void log_probs_backward(exec::cuda_policy policy, const logits_layout& layout,
                        std::span<const T> logits, std::span<const std::int64_t> labels,
                        const log_prob_seeds& seeds, std::span<float> grad_logits,
                        float temperature = 1.0f) {
  const std::size_t rows = labels.size();
  detail::require_logits_shape(layout, logits.size(), rows, "logits");
  detail::require_temperature(temperature);
  detail::require_logits_shape(layout, grad_logits.size(), rows, "grad_logits");
  detail::require_size(seeds.log_probs.size(), rows, "seeds.log_probs", "one per label");
  if (!seeds.entropy.empty())
    detail::require_size(seeds.entropy.size(), rows, "seeds.entropy", "one per label, or empty");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::log_probs_backward(temp, bytes, logits.data(), rows, layout.vocab,
                                        layout.stride(), labels.data(), seeds.log_probs.data(),
                                        seeds.entropy.empty() ? nullptr : seeds.entropy.data(),
                                        grad_logits.data(), temperature, policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"seeds.log_probs", "seeds.entropy"});
}

}  // namespace cascade_rl
