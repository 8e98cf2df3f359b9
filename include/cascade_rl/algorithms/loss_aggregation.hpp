#pragma once
// Loss aggregation with explicit, global normalisers.
//
// Every aggregation mode is a per-token weight c_t, so that
//     loss = sum_t c_t * l_t        and        dL/dlogp_t = c_t * dl_t/dlogp_t.
// The weights divide by counts the caller fixes once per optimizer step (total valid
// tokens, total sequences, a fixed scale; summed over micro-batches and ranks), never
// by the counts of the slice at hand. A batch cut into micro-batches at sequence
// boundaries therefore gets, slice by slice, exactly the gradient of the whole batch,
// and the slice losses add up to the whole-batch loss. Dividing each micro-batch by
// its own token count is the classic mistake (it overweights short micro-batches).
//
// Modes keep veRL's names (verl/trainer/ppo/core_algos.py, agg_loss):
//   token-mean               c_t = 1 / tokens
//   token-sum                c_t = 1
//   seq-mean-token-sum       c_t = 1 / sequences
//   seq-mean-token-mean      c_t = 1 / (n_i * sequences), n_i = valid tokens of t's sequence
//   seq-mean-token-sum-norm  c_t = 1 / (sequences * scale)   (veRL: scale = padded length T;
//                                                             Dr. GRPO: a fixed constant)
// and c_t = 0 on masked tokens. veRL counts as "sequences" only those with at least one
// valid token (a fully masked row neither adds to the sum nor to the count); so does
// local_loss_counts below.

#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "cascade_rl/algorithms/loss_counts.hpp"
#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/terms/aggregation_weight.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"
#include "cascade_rl/terms/token_loss.hpp"

namespace cascade_rl {

[[nodiscard]] constexpr std::string_view to_string(loss_aggregation mode) {
  switch (mode) {
    case loss_aggregation::token_mean: return "token-mean";
    case loss_aggregation::token_sum: return "token-sum";
    case loss_aggregation::seq_mean_token_sum: return "seq-mean-token-sum";
    case loss_aggregation::seq_mean_token_mean: return "seq-mean-token-mean";
    case loss_aggregation::seq_mean_token_sum_norm: return "seq-mean-token-sum-norm";
  }
  return "unknown";
}

template <exec::host_policy Policy>
[[nodiscard]] loss_counts local_loss_counts(const Policy& policy, const token_layout& layout) {
  struct acc_t {
    std::size_t tokens = 0;
    std::size_t sequences = 0;
  };
  const acc_t total = detail::blocked_reduce(
      policy, layout.sequences(), acc_t{},
      [&](acc_t& acc, std::size_t s) {
        const std::size_t n = layout.valid_tokens(s);
        acc.tokens += n;
        acc.sequences += n > 0;
      },
      [](acc_t& sum, const acc_t& part) {
        sum.tokens += part.tokens;
        sum.sequences += part.sequences;
      });
  return {total.tokens, total.sequences};
}

namespace detail {

inline void require_positive_normalizer(double value, std::string_view field,
                                        loss_aggregation mode) {
  if (!(value > 0) || !std::isfinite(value))
    fail(field, "is " + std::to_string(value) + ", but " + std::string(to_string(mode)) +
                    " divides by it and the batch has valid tokens (expected a finite "
                    "count > 0 fixed for the whole optimizer step)");
}

// Calls f(value, name) for each field of the normaliser the mode divides by: the one
// list that the checks (require_normalizer_for) and the fused path's test
// (uniform_aggregation_weight) read.
template <class F>
void for_each_divisor(loss_aggregation mode, const loss_normalizer& normalizer, F&& f) {
  switch (mode) {
    case loss_aggregation::token_mean: f(normalizer.tokens, "normalizer.tokens"); break;
    case loss_aggregation::token_sum: break;
    case loss_aggregation::seq_mean_token_sum:
    case loss_aggregation::seq_mean_token_mean:
      f(normalizer.sequences, "normalizer.sequences");
      break;
    case loss_aggregation::seq_mean_token_sum_norm:
      f(normalizer.sequences, "normalizer.sequences");
      f(normalizer.scale, "normalizer.scale");
      break;
  }
}

// Refuses a normaliser made for another mode than the loss aggregates by (every
// executor's check, whatever the batch holds).
inline void require_normalizer_mode(loss_aggregation mode, const loss_normalizer& normalizer) {
  if (normalizer.mode != mode)
    fail("normalizer", "was made for " + std::string(to_string(normalizer.mode)) +
                           ", but the loss aggregates by " + std::string(to_string(mode)) +
                           " (options.aggregation): make it with loss_counts::normalizer(mode)");
}

// Refuses a normaliser the mode divides by when it is not a positive finite number
// (every executor's check: the caller has already seen that the batch has a valid token).
inline void require_normalizer_for(loss_aggregation mode, const loss_normalizer& normalizer) {
  for_each_divisor(mode, normalizer, [mode](double value, std::string_view field) {
    require_positive_normalizer(value, field, mode);
  });
}

// The same, when the batch has valid tokens. A batch without valid tokens contributes
// nothing, so any normaliser passes.
template <class Policy>
void validate_normalizer(const Policy& policy, const token_layout& layout,
                         const loss_normalizer& normalizer, loss_aggregation mode) {
  require_normalizer_mode(mode, normalizer);
  const bool any_valid =
      first_index_where(policy, layout.tokens(), [&](std::size_t t) { return layout.valid(t); }) !=
      no_index;
  if (any_valid) require_normalizer_for(mode, normalizer);
}

// Writes c_t into weights_out without validating (callers validate first).
template <class Policy, std::floating_point T>
void write_aggregation_weights(const Policy& policy, const token_layout& layout,
                               const loss_normalizer& normalizer, loss_aggregation mode,
                               std::span<T> weights_out) {
  if (mode == loss_aggregation::seq_mean_token_mean) {
    // The weight depends on the sequence's own valid count: one task per sequence.
    for_each_index(
        policy, layout.sequences(),
        [&](std::size_t s) {
          const std::size_t n = layout.valid_tokens(s);
          const double c = terms::aggregation_weight(mode, normalizer, n);
          for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
            weights_out[t] = layout.valid(t) ? static_cast<T>(c) : T(0);
        },
        /*min_parallel=*/64);
    return;
  }
  const double c = terms::aggregation_weight(mode, normalizer, 0);
  const T weight = static_cast<T>(c);
  for_each_index(policy, layout.tokens(),
                 [&](std::size_t t) { weights_out[t] = layout.valid(t) ? weight : T(0); });
}

using terms::token_loss;
using terms::token_loss_with_kl;

template <class L>
concept carries_approx_kl = requires(const L& l) { l.approx_kl; };

// The sum channels of a token term: the loss, and approx_kl when the term carries it.
template <class Metrics, class Term>
inline constexpr std::size_t loss_channels =
    carries_approx_kl<std::invoke_result_t<Term&, std::size_t, Metrics&>> ? 2 : 1;

// Writes a token's channel terms (its weighted loss, and approx_kl) into a chunk of
// chunked_blocked_sum; masked tokens write 0.0 into every channel.
template <std::size_t Channels, class L>
void write_channels(double* out, std::size_t i, double weighted_value, const L& l,
                    std::uint64_t valid = ~std::uint64_t{0}) {
  out[i] = weighted_value;
  if constexpr (Channels == 2) out[sum_chunk + i] = math::detail::blend(valid, l.approx_kl, 0.0);
}

// The channel sums back into the metrics.
template <class Metrics, std::size_t Channels>
void add_channel_sums(Metrics& metrics, const std::array<double, Channels>& sums) {
  if constexpr (Channels == 2) metrics.approx_kl_sum += sums[1];
}

struct no_metrics {
  no_metrics& operator+=(const no_metrics&) { return *this; }
};

// metrics += part where the mask is set, without a branch: how the fused masked loop
// drops a masked token's counts. (The host terms count only integers into their
// metrics; approx_kl rides in a sum channel.)
inline void add_where(std::uint64_t, no_metrics&, const no_metrics&) {}
inline void add_where(std::uint64_t mask, policy_loss_metrics& metrics,
                      const policy_loss_metrics& part) {
  policy_loss_metrics::for_each_count(
      metrics, part, [mask](std::size_t& mine, const std::size_t& theirs) { mine += theirs & mask; });
}

// One token of a masked loop without control flow: the token is computed whatever its
// inputs hold, and the mask (valid: all ones or zero) blended in, so that a masked token
// writes 0.0 into every channel and grad_out, and counts nothing. c is its weight.
template <std::size_t Channels, class Metrics, std::floating_point T, class Term>
CASCADE_RL_ALWAYS_INLINE inline void blended_token(Metrics& metrics, std::uint64_t valid, double c,
                                                   std::size_t t, std::size_t i, double* out,
                                                   std::span<T> grad_out, Term& term) {
  Metrics token_metrics{};
  const auto l = term(t, token_metrics);
  add_where(valid, metrics, token_metrics);
  write_channels<Channels>(out, i, math::detail::blend(valid, c * l.value, 0.0), l, valid);
  grad_out[t] = static_cast<T>(math::detail::blend(valid, c * l.grad, 0.0));
}

template <class Metrics>
struct aggregated {
  double loss = 0;
  Metrics metrics{};
};

// The shared driver of every loss. `grad_out` must already hold the aggregation
// weights (write_aggregation_weights); for each valid token t, term(t, metrics) gives
// the token's loss and derivative, and grad_out[t] becomes c_t * dl_t. The loss sum
// runs over fixed blocks in block order, so seq and par agree bit for bit.
template <class Metrics, class Policy, std::floating_point T, class Term>
aggregated<Metrics> reduce_token_losses(const Policy& policy, const token_layout& layout,
                                        std::span<T> grad_out, Term&& term) {
  // A masked token adds 0.0 where a plain loop would skip it: the same bits, since a
  // sum that starts at +0.0 is never -0.0 and x + 0.0 == x for every other x.
  constexpr std::size_t channels = loss_channels<Metrics, Term>;
  const std::span<const std::uint8_t> mask = layout.mask();
  auto total = chunked_blocked_sum<channels>(
      policy, layout.tokens(), Metrics{},
      [&](Metrics& state, std::size_t first, std::size_t last, double* out) {
        Metrics metrics = state;  // a local the compiler keeps in registers
        if (mask.empty()) {
          for (std::size_t t = first; t < last; ++t) {
            const double c = static_cast<double>(grad_out[t]);
            const auto l = term(t, metrics);
            write_channels<channels>(out, t - first, c * l.value, l);
            grad_out[t] = static_cast<T>(c * l.grad);
          }
        } else {
          // As fused_token_losses: every token is computed and the mask blended in, so
          // the loop has no control flow and vectorises (a skip made this mode, veRL's
          // and GSPO's seq-mean-token-mean, several times slower than the others).
          for (std::size_t t = first; t < last; ++t)
            blended_token<channels>(metrics, math::detail::mask_of(mask[t] != 0),
                                    static_cast<double>(grad_out[t]), t, t - first, out, grad_out,
                                    term);
        }
        state = metrics;
      },
      [](Metrics& sum, const Metrics& part) { sum += part; });
  add_channel_sums(total.state, total.sums);
  return {total.sums[0], total.state};
}

// The single-pass path of the losses. Every mode but seq-mean-token-mean gives all valid
// tokens one weight c; when the normaliser is one the mode can divide by, no scan for a
// valid token is needed either. Then the checks of the inputs ride along the loss pass
// (nonfinite(t) flags a valid token with a NaN or infinite input) instead of a pass of
// their own per input, and grad_out is written once. The arithmetic is that of
// write_aggregation_weights followed by reduce_token_losses, bit for bit: c is rounded
// to T as grad_out would have held it, and the blocks are the same.
template <std::floating_point T>
bool uniform_aggregation_weight(const loss_normalizer& normalizer, loss_aggregation mode,
                                T& weight) {
  // seq-mean-token-mean weighs each sequence by its own valid tokens; a normaliser of
  // another mode goes to the checks, which refuse it.
  if (mode == loss_aggregation::seq_mean_token_mean || normalizer.mode != mode) return false;
  bool usable = true;
  for_each_divisor(mode, normalizer, [&usable](double value, std::string_view) {
    usable = usable && value > 0 && std::isfinite(value);
  });
  if (!usable) return false;
  const double c = terms::aggregation_weight(mode, normalizer, 0);
  weight = static_cast<T>(c);
  return true;
}

template <class Metrics>
struct checked_aggregate {
  aggregated<Metrics> total{};
  bool nonfinite = false;  // some valid token had a NaN or infinite input
};

template <class Metrics, class Policy, std::floating_point T, class Nonfinite, class Term>
checked_aggregate<Metrics> fused_token_losses(const Policy& policy, const token_layout& layout,
                                              std::span<T> grad_out, T weight,
                                              Nonfinite&& nonfinite, Term&& term) {
  struct block_state {
    Metrics metrics{};
    bool nonfinite = false;
  };
  const double c = static_cast<double>(weight);
  const auto combine = [](block_state& total, const block_state& part) {
    total.metrics += part.metrics;
    total.nonfinite = total.nonfinite || part.nonfinite;
  };
  // Masked tokens add 0.0, as in reduce_token_losses.
  constexpr std::size_t channels = loss_channels<Metrics, Term>;
  const std::span<const std::uint8_t> mask = layout.mask();
  const auto terms = [&](block_state& state, std::size_t first, std::size_t last, double* out) {
    // Locals, not the block's state: the compiler keeps them in registers, and the
    // unmasked loop (free of control flow for the simple terms) vectorises. (An unsigned
    // flag: GCC 12 does not vectorise an |= reduction on bool.)
    Metrics metrics = state.metrics;
    unsigned bad = 0;
    if (mask.empty()) {
      for (std::size_t t = first; t < last; ++t) {
        bad |= static_cast<unsigned>(nonfinite(t));
        const auto l = term(t, metrics);
        write_channels<channels>(out, t - first, c * l.value, l);
        grad_out[t] = static_cast<T>(c * l.grad);
      }
    } else {
      // Every token is computed (a masked one from whatever its inputs hold) and the mask
      // blended in, so that this loop has no control flow either.
      for (std::size_t t = first; t < last; ++t) {
        const std::uint64_t valid = math::detail::mask_of(mask[t] != 0);
        bad |= static_cast<unsigned>(nonfinite(t)) & static_cast<unsigned>(valid & 1);
        blended_token<channels>(metrics, valid, c, t, t - first, out, grad_out, term);
      }
    }
    state.metrics = metrics;
    state.nonfinite |= bad != 0;
  };
  auto total = chunked_blocked_sum<channels>(policy, layout.tokens(), block_state{}, terms, combine);
  add_channel_sums(total.state.metrics, total.sums);
  return {{total.sums[0], total.state.metrics}, total.state.nonfinite};
}

template <std::floating_point T>
bool nonfinite_at(std::span<const T> values, std::size_t t) {
  return !std::isfinite(values[t]);
}

}  // namespace detail

// Writes the aggregation weight c_t of every token (0 on masked tokens).
template <exec::host_policy Policy, contiguous_output Out>
void aggregation_weights(const Policy& policy, const token_layout& layout, Out&& weights,
                         const loss_normalizer& normalizer, loss_aggregation mode) {
  const auto weights_out = output_span(weights);
  detail::require_size(weights_out.size(), layout.tokens(), "weights_out", "one per token");
  detail::validate_normalizer(policy, layout, normalizer, mode);
  detail::write_aggregation_weights(policy, layout, normalizer, mode, weights_out);
}

// Aggregates a loss the caller computed per token (an entropy bonus, a custom term):
// returns sum_t c_t * token_losses[t] and writes grad_out[t] = c_t * token_grads[t],
// the gradient of the aggregated loss with respect to log-prob t.
template <exec::host_policy Policy, contiguous_output Out>
double aggregate_token_losses(const Policy& policy, const token_layout& layout,
                              const token_loss_inputs<output_value_t<Out>>& inputs, Out&& grad,
                              const loss_normalizer& normalizer, loss_aggregation mode) {
  using T = output_value_t<Out>;
  const std::span<const T> token_losses = inputs.token_losses;
  const std::span<const T> token_grads = inputs.token_grads;
  const std::span<T> grad_out = output_span(grad);
  const std::size_t n = layout.tokens();
  T weight{};
  if (token_losses.size() == n && token_grads.size() == n && grad_out.size() == n &&
      detail::uniform_aggregation_weight(normalizer, mode, weight)) {
    const auto fused = detail::fused_token_losses<detail::no_metrics>(
        policy, layout, grad_out, weight,
        [&](std::size_t t) {
          return detail::nonfinite_at(token_losses, t) | detail::nonfinite_at(token_grads, t);
        },
        [&](std::size_t t, detail::no_metrics&) {
          return detail::token_loss{static_cast<double>(token_losses[t]),
                                    static_cast<double>(token_grads[t])};
        });
    if (!fused.nonfinite) return fused.total.loss;
    // A bad input: the checks below name it as they always have.
  }
  detail::require_size(token_losses.size(), n, "token_losses", "one per token");
  detail::require_size(token_grads.size(), n, "token_grads", "one per token");
  detail::require_size(grad_out.size(), n, "grad_out", "one per token");
  detail::require_finite_where_valid(policy, token_losses, layout, "token_losses");
  detail::require_finite_where_valid(policy, token_grads, layout, "token_grads");
  detail::validate_normalizer(policy, layout, normalizer, mode);
  detail::write_aggregation_weights(policy, layout, normalizer, mode, grad_out);
  return detail::reduce_token_losses<detail::no_metrics>(
             policy, layout, grad_out,
             [&](std::size_t t, detail::no_metrics&) {
               return detail::token_loss{static_cast<double>(token_losses[t]),
                                         static_cast<double>(token_grads[t])};
             })
      .loss;
}

}  // namespace cascade_rl
