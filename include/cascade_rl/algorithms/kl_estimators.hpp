#pragma once
// KL penalties and KL losses over a batch of tokens. The per-token estimators (k1, abs,
// k2, k3 with veRL's clamps) and their derivatives are terms/kl_token.hpp.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/kl.hpp"
#include "cascade_rl/terms/kl_token.hpp"

namespace cascade_rl {

[[nodiscard]] constexpr std::string_view to_string(kl_estimator estimator) {
  switch (estimator) {
    case kl_estimator::k1: return "k1";
    case kl_estimator::abs: return "abs";
    case kl_estimator::k2: return "k2";
    case kl_estimator::k3: return "k3";
  }
  return "unknown";
}

namespace detail {

inline void validate_kl_options(const kl_options& options, std::string_view prefix) {
  if (options.estimator != kl_estimator::k3) return;
  if (!(options.input_clamp > 0))
    fail(std::string(prefix) + ".input_clamp",
         "is " + std::to_string(options.input_clamp) + ", expected > 0");
  if (!(options.output_clamp > 0))
    fail(std::string(prefix) + ".output_clamp",
         "is " + std::to_string(options.output_clamp) + ", expected > 0");
}

// Calls f with the options' estimator as a branch-free term (logp, ref) -> token_loss,
// so that each estimator's loop is compiled, and vectorised, on its own (terms::kl_token
// decides per token). The same functions: the same bits either way.
template <class F>
decltype(auto) with_estimator_term(const kl_options& options, F&& f) {
  switch (options.estimator) {
    case kl_estimator::k1:
      return f([](double logp, double ref) { return terms::k1_token(logp, ref); });
    case kl_estimator::abs:
      return f([](double logp, double ref) { return terms::abs_token(logp, ref); });
    case kl_estimator::k2:
      return f([](double logp, double ref) { return terms::k2_token(logp, ref); });
    case kl_estimator::k3: break;
  }
  return f([in = options.input_clamp, out = options.output_clamp](double logp, double ref) {
    return terms::k3_token(logp, ref, in, out);
  });
}

// with_estimator_term, the straight-through gradient (options.straight_through) its own
// instantiation too.
template <class F>
decltype(auto) with_kl_term(const kl_options& options, F&& f) {
  return with_estimator_term(options, [&](const auto estimator) {
    if (options.straight_through)
      return f([estimator](double logp, double ref) {
        return terms::straight_through(estimator(logp, ref), logp, ref);
      });
    return f(estimator);
  });
}

template <class Policy, std::floating_point T>
void validate_kl_inputs(const Policy& policy, const token_layout& layout,
                        std::span<const T> log_probs, std::span<const T> ref_log_probs) {
  require_size(log_probs.size(), layout.tokens(), "log_probs", "one per token");
  require_size(ref_log_probs.size(), layout.tokens(), "ref_log_probs", "one per token");
  require_finite_where_valid(policy, log_probs, layout, "log_probs");
  require_finite_where_valid(policy, ref_log_probs, layout, "ref_log_probs");
}

}  // namespace detail

// Per-token estimates k_t and d k_t / d logp_t (both 0 on masked tokens). Returns the
// sum of k_t over valid tokens, whose gradient is grad_out.
template <exec::host_policy Policy, contiguous_output Out>
double kl_penalty(const Policy& policy, const token_layout& layout,
                  const kl_inputs<output_value_t<Out>>& inputs, Out&& values,
                  std::type_identity_t<std::span<output_value_t<Out>>> grad_out,
                  const kl_options& options = {}) {
  using T = output_value_t<Out>;
  detail::validate_kl_options(options, "options");
  const std::span<const T> log_probs = inputs.log_probs;
  const std::span<const T> ref_log_probs = inputs.ref_log_probs;
  const std::span<T> values_out = output_span(values);
  const auto term = [&](std::size_t t) {
    if (!layout.valid(t)) {
      values_out[t] = T(0);
      grad_out[t] = T(0);
      return 0.0;
    }
    const detail::token_loss k = terms::kl_token(static_cast<double>(log_probs[t]),
                                                 static_cast<double>(ref_log_probs[t]), options);
    values_out[t] = static_cast<T>(k.value);
    grad_out[t] = static_cast<T>(k.grad);
    return k.value;
  };
  const std::size_t n = layout.tokens();
  if (log_probs.size() == n && ref_log_probs.size() == n && values_out.size() == n &&
      grad_out.size() == n) {
    // One pass: the finiteness checks ride along the sum (blocked_sum's arithmetic).
    // Every token is computed and the mask blended in (0 on masked tokens), so that
    // the loop has no control flow.
    const std::span<const std::uint8_t> mask = layout.mask();
    const auto total = detail::with_kl_term(options, [&](const auto kl) {
      return detail::chunked_blocked_sum(
          policy, n, 0u,
          [&](unsigned& nonfinite, std::size_t first, std::size_t last, double* out) {
            // Locals the compiler keeps in registers (a span read through the capture
            // is reloaded after every store, and that load does not vectorise).
            unsigned bad = 0;
            const auto token = [&](std::size_t t, std::uint64_t valid) {
              bad |= static_cast<unsigned>(valid & 1) &
                     static_cast<unsigned>(detail::nonfinite_at(log_probs, t) |
                                           detail::nonfinite_at(ref_log_probs, t));
              const detail::token_loss k =
                  kl(static_cast<double>(log_probs[t]), static_cast<double>(ref_log_probs[t]));
              const double value = math::detail::blend(valid, k.value, 0.0);
              values_out[t] = static_cast<T>(value);
              grad_out[t] = static_cast<T>(math::detail::blend(valid, k.grad, 0.0));
              out[t - first] = value;
            };
            // Two loops: a mask chosen per token in one loop would let GCC thread the
            // known-zero arm into a branch (no vectorisation).
            const std::uint8_t* const mask_data = mask.data();
            if (mask.empty())
              for (std::size_t t = first; t < last; ++t) token(t, ~std::uint64_t{0});
            else
              for (std::size_t t = first; t < last; ++t)
                token(t, math::detail::mask_of(mask_data[t] != 0));
            nonfinite |= bad;
          },
          [](unsigned& total_nonfinite, unsigned part) { total_nonfinite |= part; });
    });
    if (total.state == 0) return total.sums[0];
    // A bad input: the checks below name it as they always have.
  }
  detail::validate_kl_inputs(policy, layout, log_probs, ref_log_probs);
  detail::require_size(values_out.size(), layout.tokens(), "values_out", "one per token");
  detail::require_size(grad_out.size(), layout.tokens(), "grad_out", "one per token");
  return detail::blocked_sum(policy, layout.tokens(), term);
}

// coefficient * aggregate(k_t) with its gradient dL/dlogp in grad_out.
template <exec::host_policy Policy, contiguous_output Out>
double kl_loss(const Policy& policy, const token_layout& layout,
               const kl_inputs<output_value_t<Out>>& inputs, Out&& grad,
               const loss_normalizer& normalizer, const kl_loss_options& options = {}) {
  using T = output_value_t<Out>;
  const std::span<const T> log_probs = inputs.log_probs;
  const std::span<const T> ref_log_probs = inputs.ref_log_probs;
  const std::span<T> grad_out = output_span(grad);
  detail::validate_kl_options(options.kl, "options.kl");
  if (!std::isfinite(options.coefficient))
    detail::fail("options.coefficient", "is not finite");
  const double coefficient = options.coefficient;
  const std::size_t n = layout.tokens();
  return detail::with_kl_term(options.kl, [&](const auto kl) {
           return detail::checked_token_losses<detail::no_metrics>(
               policy, layout, grad_out, normalizer, options.aggregation,
               log_probs.size() == n && ref_log_probs.size() == n && grad_out.size() == n,
               [&] {
                 detail::validate_kl_inputs(policy, layout, log_probs, ref_log_probs);
                 detail::require_size(grad_out.size(), n, "grad_out", "one per token");
                 detail::validate_normalizer(policy, layout, normalizer, options.aggregation);
               },
               [&](std::size_t t) {
                 return detail::nonfinite_at(log_probs, t) | detail::nonfinite_at(ref_log_probs, t);
               },
               [&](std::size_t t, detail::no_metrics&) {
                 const detail::token_loss k =
                     kl(static_cast<double>(log_probs[t]), static_cast<double>(ref_log_probs[t]));
                 return detail::token_loss{coefficient * k.value, coefficient * k.grad};
               });
         })
      .loss;
}

}  // namespace cascade_rl
