#pragma once
// The backward pass of log_probs_from_logits (log_probs.hpp): given per-row seeds
// g_r = dL/dlogp_r and h_r = dL/dH_r (an entropy bonus or loss), the gradient of L with
// respect to the logits,
//   dL/dx[r][v] = (g_r (1[v == label_r] - p_rv) - h_r p_rv (log p_rv + H_r)) / T,
// terms/log_softmax_gradient.hpp. Each row's log-sum-exp and entropy are recomputed in
// the forward's canonical order (the logits are read twice, as autograd's softmax
// backward reads its saved output), so exec::seq, exec::par, the Thrust path and the
// kernel give the same bits. Typical use: the seeds are a policy loss's grad_out and,
// for an entropy term aggregated by aggregate_token_losses, that call's grad_out.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "cascade_rl/algorithms/log_probs.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/logits_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/terms/log_softmax_gradient.hpp"

namespace cascade_rl {

// The seeds of log_probs_backward, one per row: dL/dlogp and dL/dH (empty: no entropy
// term, h = 0).
struct log_prob_seeds {
  std::span<const float> log_probs{};
  std::span<const float> entropy{};
};

// grad_logits: float, laid out like the logits (`layout`); columns [0, vocab) of each
// row are written, the padding of a strided row is left alone.
template <exec::host_policy Policy, class Logits>
requires contiguous_sized_range<Logits> && logit_type<std::ranges::range_value_t<Logits>>
void log_probs_backward(const Policy& policy, const logits_layout& layout, const Logits& logits_in,
                        std::span<const std::int64_t> labels, const log_prob_seeds& seeds,
                        std::span<float> grad_logits, float temperature = 1.0f) {
  using L = std::ranges::range_value_t<Logits>;
  const std::span<const L> logits = input_span(logits_in);
  const std::size_t vocab = layout.vocab;
  const std::size_t row_stride = layout.stride();
  const std::size_t rows = labels.size();
  detail::require_logits_shape(layout, logits.size(), rows, "logits");
  detail::require_temperature(temperature);
  detail::require_logits_shape(layout, grad_logits.size(), rows, "grad_logits");
  detail::require_size(seeds.log_probs.size(), rows, "seeds.log_probs", "one per label");
  if (!seeds.entropy.empty())
    detail::require_size(seeds.entropy.size(), rows, "seeds.entropy", "one per label, or empty");
  detail::require_finite(policy, seeds.log_probs, "seeds.log_probs");
  detail::require_finite(policy, seeds.entropy, "seeds.entropy");
  detail::require_labels_in_range(policy, labels, vocab);

  const float inverse = 1.0f / temperature;
  detail::for_each_index(
      policy, rows,
      [&](std::size_t r) {
        const L* x = logits.data() + r * row_stride;
        const terms::softmax_row row = terms::softmax_row_of(detail::row_lse(x, vocab, inverse));
        const double g = seeds.log_probs[r];
        const double h = seeds.entropy.empty() ? 0.0 : static_cast<double>(seeds.entropy[r]);
        const auto label = static_cast<std::size_t>(labels[r]);
        float* out = grad_logits.data() + r * row_stride;
        for (std::size_t v = 0; v < vocab; ++v)
          out[v] = terms::logit_gradient(detail::logit_value(x[v]) * inverse, v == label, row, g, h,
                                         inverse);
      },
      /*min_parallel=*/2);
}

}  // namespace cascade_rl
