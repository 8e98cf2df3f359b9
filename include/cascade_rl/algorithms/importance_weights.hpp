#pragma once
// Importance correction against the behaviour (rollout) policy.
//
// The sampler (vLLM, SGLang) and the trainer compute log-probs with different kernels
// and precisions, so even "on-policy" tokens carry a ratio
//     r_t = pi_target(y_t) / pi_behaviour(y_t) = exp(target_logp - behaviour_logp)
// that is not exactly 1. The target is the policy the update starts from: the old
// (proximal) log-probs in PPO, the trainer's own log-probs in strictly on-policy
// REINFORCE. The weight is a stop-gradient constant that multiplies the token loss:
//   truncated:  w_t = min(r_t, cap)        (truncated IS; veRL tis_imp_ratio_cap,
//                                            exp(old_log_prob - rollout_log_probs))
//   band_mask:  w_t = r_t if lo <= r_t <= hi, else 0 (the token is dropped)
//               (MOPD in Nemotron-Cascade 2: w_t = r_t * 1[0.5 <= r_t <= 2.0])
// The weight of one token is terms/importance_weight.hpp.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>

#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/terms/importance_weight.hpp"

namespace cascade_rl {

// Tokens the correction changed, summed over valid tokens (add them across slices).
struct importance_counts {
  std::size_t truncated = 0;  // r_t > cap
  std::size_t masked = 0;     // r_t outside the band

  importance_counts& operator+=(const importance_counts& other) {
    truncated += other.truncated;
    masked += other.masked;
    return *this;
  }
};

namespace detail {

inline void validate_importance(const importance_options& options, std::string_view prefix) {
  const std::string p(prefix);
  switch (options.mode) {
    case importance_sampling::none: break;
    case importance_sampling::truncated:
      if (!(options.cap > 0))
        fail(p + ".cap", "is " + std::to_string(options.cap) + ", expected a cap > 0");
      break;
    case importance_sampling::band_mask:
      if (!(options.band_low >= 0))
        fail(p + ".band_low", "is " + std::to_string(options.band_low) + ", expected >= 0");
      if (!(options.band_high >= options.band_low))
        fail(p + ".band_high", "is " + std::to_string(options.band_high) +
                                   ", below band_low = " + std::to_string(options.band_low));
      break;
  }
}

using terms::importance_weight;
using terms::importance_weight_of;

inline void count(importance_counts& counts, const importance_weight& w) {
  counts.truncated += w.truncated;
  counts.masked += w.masked;
}

// Validates the behaviour log-probs: a correction needs one finite value per valid
// token; without a correction they are not read, but a non-empty span of the wrong
// size still betrays a caller bug and is refused.
template <class Policy, std::floating_point T>
void validate_behaviour(const Policy& policy, const token_layout& layout,
                        std::span<const T> behaviour_log_probs, const importance_options& options) {
  if (options.mode == importance_sampling::none) {
    if (!behaviour_log_probs.empty())
      require_size(behaviour_log_probs.size(), layout.tokens(), "behaviour_log_probs",
                   "one per token");
    return;
  }
  if (behaviour_log_probs.empty() && layout.tokens() > 0)
    fail("behaviour_log_probs", "is empty, but the importance correction needs one per token");
  require_size(behaviour_log_probs.size(), layout.tokens(), "behaviour_log_probs", "one per token");
  require_finite_where_valid(policy, behaviour_log_probs, layout, "behaviour_log_probs");
}

}  // namespace detail

// Writes w_t for every token (0 on masked tokens) and returns how many valid tokens
// the cap truncated or the band dropped. For logging, or for a backend that applies the
// weights itself; the losses compute the same weights inline.
template <exec::host_policy Policy, contiguous_output Out>
importance_counts importance_weights(const Policy& policy, const token_layout& layout,
                                     const importance_inputs<output_value_t<Out>>& inputs,
                                     Out&& weights, const importance_options& options) {
  using T = output_value_t<Out>;
  const std::span<const T> target_log_probs = inputs.target_log_probs;
  const std::span<const T> behaviour_log_probs = inputs.behaviour_log_probs;
  const std::span<T> weights_out = output_span(weights);
  const std::size_t n = layout.tokens();
  detail::validate_importance(options, "options");
  detail::require_size(target_log_probs.size(), n, "target_log_probs", "one per token");
  detail::require_size(weights_out.size(), n, "weights_out", "one per token");
  detail::require_finite_where_valid(policy, target_log_probs, layout, "target_log_probs");
  detail::validate_behaviour(policy, layout, behaviour_log_probs, options);
  return detail::blocked_reduce(
      policy, n, importance_counts{},
      [&](importance_counts& acc, std::size_t t) {
        if (!layout.valid(t)) {
          weights_out[t] = T(0);
          return;
        }
        const double log_ratio =
            options.mode == importance_sampling::none
                ? 0.0
                : static_cast<double>(target_log_probs[t]) - static_cast<double>(behaviour_log_probs[t]);
        const auto w = detail::importance_weight_of(log_ratio, options);
        detail::count(acc, w);
        weights_out[t] = static_cast<T>(w.weight);
      },
      [](importance_counts& total, const importance_counts& part) { total += part; });
}

}  // namespace cascade_rl
