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

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/loss_normalizer.hpp"
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
// list that the checks (require_normalizer_for) and the token pass's weights
// (usable_token_weights) read.
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

// A token term is term(t, metrics), or term(t, metrics, s) when it reads a value of its
// sequence s (GSPO's and GMPO's per-sequence values: one per sequence, not one per token).
template <class Term, class Metrics>
inline constexpr bool reads_sequence =
    std::is_invocable_v<Term&, std::size_t, Metrics&, std::size_t>;

template <class Term, class Metrics>
using term_result_t =
    typename std::conditional_t<reads_sequence<Term, Metrics>,
                                std::invoke_result<Term&, std::size_t, Metrics&, std::size_t>,
                                std::invoke_result<Term&, std::size_t, Metrics&>>::type;

// The sum channels of a token term: the loss, and approx_kl when the term carries it.
template <class Metrics, class Term>
inline constexpr std::size_t loss_channels =
    carries_approx_kl<term_result_t<Term, Metrics>> ? 2 : 1;

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

// The aggregation weights of one call: c for every valid token, or one c per sequence
// (seq-mean-token-mean weighs a sequence by its own valid tokens). Each is rounded to
// the gradient's type T, as a weight written into a T array would be, and the token
// terms are computed with that rounded value (every executor does the same).
struct token_weights {
  double uniform = 0.0;
  std::vector<double> per_sequence;  // empty: `uniform` for every token
};

// The weights when the normaliser is one the mode can divide by; else nothing (the
// caller's checks then refuse it, unless the batch has no valid token).
template <std::floating_point T, class Policy>
std::optional<token_weights> usable_token_weights(const Policy& policy, const token_layout& layout,
                                                  const loss_normalizer& normalizer,
                                                  loss_aggregation mode) {
  if (normalizer.mode != mode) return std::nullopt;
  bool usable = true;
  for_each_divisor(mode, normalizer, [&usable](double value, std::string_view) {
    usable = usable && value > 0 && std::isfinite(value);
  });
  if (!usable) return std::nullopt;
  token_weights weights;
  if (mode != loss_aggregation::seq_mean_token_mean) {
    weights.uniform =
        static_cast<double>(static_cast<T>(terms::aggregation_weight(mode, normalizer, 0)));
    return weights;
  }
  weights.per_sequence.resize(layout.sequences());
  for_each_index(
      policy, layout.sequences(),
      [&](std::size_t s) {
        weights.per_sequence[s] = static_cast<double>(static_cast<T>(
            terms::aggregation_weight(mode, normalizer, layout.valid_tokens(s))));
      },
      /*min_parallel=*/64);
  return weights;
}

// The sequence that holds token t (t < layout.tokens()): the first whose end is past t,
// so that empty sequences before it are skipped.
inline std::size_t sequence_holding(const token_layout& layout, std::size_t t) {
  std::size_t low = 0, high = layout.sequences();
  while (low < high) {
    const std::size_t mid = low + (high - low) / 2;
    if (layout.end(mid) > t) high = mid;
    else low = mid + 1;
  }
  return low;
}

template <class Metrics>
struct checked_aggregate {
  aggregated<Metrics> total{};
  bool nonfinite = false;  // some valid token had a NaN or infinite input
};

// The one token pass of every loss: for each token t, term(t, metrics) gives its loss l
// and derivative; the loss sums c_t * l.value in the canonical order (blocks, lanes) and
// grad_out[t] = c_t * l.grad, both 0.0 on masked tokens. nonfinite(t) flags a token
// with a NaN or infinite input; it rides along, on valid tokens only, so that the
// inputs are read once. A chunk of tokens runs as runs of one weight (the whole chunk,
// or one run per sequence under seq-mean-token-mean or for a term that reads its
// sequence), each a loop without control flow that vectorises: a masked token is computed
// from whatever its inputs hold and the mask blended in, and a sum that starts at +0.0
// gains nothing from the +0.0 it adds.
template <class Metrics, class Policy, std::floating_point T, class Nonfinite, class Term>
checked_aggregate<Metrics> weighted_token_losses(const Policy& policy, const token_layout& layout,
                                                 const token_weights& weights,
                                                 std::span<T> grad_out, Nonfinite&& nonfinite,
                                                 Term&& term) {
  struct block_state {
    Metrics metrics{};
    bool nonfinite = false;
  };
  const auto combine = [](block_state& total, const block_state& part) {
    total.metrics += part.metrics;
    total.nonfinite = total.nonfinite || part.nonfinite;
  };
  constexpr std::size_t channels = loss_channels<Metrics, Term>;
  constexpr bool term_reads_sequence = reads_sequence<Term, Metrics>;
  const std::span<const std::uint8_t> mask = layout.mask();
  const bool per_sequence = !weights.per_sequence.empty();
  const bool by_sequence = per_sequence || term_reads_sequence;
  const auto terms = [&](block_state& state, std::size_t first, std::size_t last, double* out) {
    // Locals, not the block's state: the compiler keeps them in registers. (An unsigned
    // flag: GCC 12 does not vectorise an |= reduction on bool.)
    Metrics metrics = state.metrics;
    unsigned bad = 0;
    std::size_t sequence = by_sequence ? sequence_holding(layout, first) : 0;
    for (std::size_t begin = first; begin < last;) {
      std::size_t end = last;
      double c = weights.uniform;
      const std::size_t s = sequence;
      if (by_sequence) {
        end = std::min(last, layout.end(s));
        if (per_sequence) c = weights.per_sequence[s];
        ++sequence;
      }
      // The term of this run's tokens, its sequence bound when it reads one.
      const auto run_term = [&](std::size_t t, Metrics& m) CASCADE_RL_ALWAYS_INLINE {
        if constexpr (term_reads_sequence)
          return term(t, m, s);
        else
          return term(t, m);
      };
      if (mask.empty()) {
        for (std::size_t t = begin; t < end; ++t) {
          bad |= static_cast<unsigned>(nonfinite(t));
          const auto l = run_term(t, metrics);
          write_channels<channels>(out, t - first, c * l.value, l);
          grad_out[t] = static_cast<T>(c * l.grad);
        }
      } else {
        for (std::size_t t = begin; t < end; ++t) {
          const std::uint64_t valid = math::detail::mask_of(mask[t] != 0);
          bad |= static_cast<unsigned>(nonfinite(t)) & static_cast<unsigned>(valid & 1);
          blended_token<channels>(metrics, valid, c, t, t - first, out, grad_out, run_term);
        }
      }
      begin = end;
    }
    state.metrics = metrics;
    state.nonfinite |= bad != 0;
  };
  auto total = chunked_blocked_sum<channels>(policy, layout.tokens(), block_state{}, terms, combine);
  add_channel_sums(total.state.metrics, total.sums);
  return {{total.sums[0], total.state.metrics}, total.state.nonfinite};
}

// A loss's token pass with its checks. When every size is right (`sizes_ok`) and the
// normaliser is usable, one pass, finiteness riding along. Otherwise, or when a value is
// not finite, validate() (the loss's checks, in the order its errors name the first bad
// input) throws; it passes only for a batch without a valid token and a normaliser the
// mode cannot divide by, whose loss and gradient are 0 whatever the weights.
template <class Metrics, class Policy, std::floating_point T, class Validate, class Nonfinite,
          class Term>
aggregated<Metrics> checked_token_losses(const Policy& policy, const token_layout& layout,
                                         std::span<T> grad_out, const loss_normalizer& normalizer,
                                         loss_aggregation mode, bool sizes_ok,
                                         const Validate& validate, Nonfinite&& nonfinite,
                                         Term&& term) {
  std::optional<token_weights> weights;
  if (sizes_ok) {
    weights = usable_token_weights<T>(policy, layout, normalizer, mode);
    if (weights) {
      auto pass =
          weighted_token_losses<Metrics>(policy, layout, *weights, grad_out, nonfinite, term);
      if (!pass.nonfinite) return pass.total;
    }
  }
  validate();
  // The checks name every bad size and every NaN or infinite value on a valid token;
  // what passes them here is a batch without a valid token whose normaliser the mode
  // cannot divide by. Anything else is a check missing from validate(): refused, never
  // run with wrong sizes or a silent NaN.
  if (!sizes_ok || weights)
    fail("inputs", "failed a check of the token pass that the loss's own checks did not name "
                   "(a size, or a NaN or infinite value on a valid token)");
  return weighted_token_losses<Metrics>(policy, layout, token_weights{}, grad_out, nonfinite, term)
      .total;
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
  return detail::checked_token_losses<detail::no_metrics>(
             policy, layout, grad_out, normalizer, mode,
             token_losses.size() == n && token_grads.size() == n && grad_out.size() == n,
             [&] {
               detail::require_size(token_losses.size(), n, "token_losses", "one per token");
               detail::require_size(token_grads.size(), n, "token_grads", "one per token");
               detail::require_size(grad_out.size(), n, "grad_out", "one per token");
               detail::require_finite_where_valid(policy, token_losses, layout, "token_losses");
               detail::require_finite_where_valid(policy, token_grads, layout, "token_grads");
               detail::validate_normalizer(policy, layout, normalizer, mode);
             },
             [&](std::size_t t) {
               return detail::nonfinite_at(token_losses, t) | detail::nonfinite_at(token_grads, t);
             },
             [&](std::size_t t, detail::no_metrics&) {
               return detail::token_loss{static_cast<double>(token_losses[t]),
                                         static_cast<double>(token_grads[t])};
             })
      .loss;
}

}  // namespace cascade_rl
