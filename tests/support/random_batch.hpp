#pragma once
// Random ragged batches for the property tests of the losses, and their splits into
// micro-batches at sequence boundaries (sub-layouts with rebased offsets).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/core/token_layout.hpp"

namespace cascade_rl::testing {

// Every aggregation mode, for tests that sweep them.
inline constexpr loss_aggregation all_aggregation_modes[] = {
    loss_aggregation::token_mean, loss_aggregation::token_sum,
    loss_aggregation::seq_mean_token_sum, loss_aggregation::seq_mean_token_mean,
    loss_aggregation::seq_mean_token_sum_norm};

struct random_batch_shape {
  std::size_t sequences = 16;
  std::size_t max_length = 12;         // lengths uniform in [0, max_length]
  double masked_probability = 0.2;     // per token
  double empty_probability = 0.1;      // per sequence: every token masked
  double log_ratio_spread = 0.3;       // old = logp + N(0, spread): exercises the clips
  double behaviour_spread = 0.4;       // behaviour = old + N(0, spread): exercises IS
};

template <class T>
struct random_batch {
  std::vector<std::int64_t> offsets;
  std::vector<std::uint8_t> mask;
  std::vector<T> log_probs, old_log_probs, behaviour_log_probs, ref_log_probs, advantages;

  [[nodiscard]] token_layout layout() const { return token_layout(offsets, mask); }
  [[nodiscard]] std::size_t tokens() const { return mask.size(); }
};

template <class T>
random_batch<T> make_random_batch(std::uint64_t seed, const random_batch_shape& shape = {}) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> length(0, shape.max_length);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_real_distribution<double> logp(-4.0, -0.01);
  std::normal_distribution<double> normal(0.0, 1.0);
  random_batch<T> batch;
  batch.offsets.push_back(0);
  for (std::size_t s = 0; s < shape.sequences; ++s) {
    const std::size_t n = length(rng);
    const bool empty = unit(rng) < shape.empty_probability;
    const double sequence_advantage = normal(rng);
    for (std::size_t t = 0; t < n; ++t) {
      batch.mask.push_back(!empty && unit(rng) >= shape.masked_probability ? 1 : 0);
      const double lp = logp(rng);
      const double old = lp + shape.log_ratio_spread * normal(rng);
      batch.log_probs.push_back(static_cast<T>(lp));
      batch.old_log_probs.push_back(static_cast<T>(old));
      batch.behaviour_log_probs.push_back(static_cast<T>(old + shape.behaviour_spread * normal(rng)));
      batch.ref_log_probs.push_back(static_cast<T>(lp + 0.5 * normal(rng)));
      // Half sequence-level (GRPO-like), half per-token (distillation-like).
      batch.advantages.push_back(
          static_cast<T>(s % 2 == 0 ? sequence_advantage : normal(rng)));
    }
    batch.offsets.push_back(static_cast<std::int64_t>(batch.mask.size()));
  }
  return batch;
}

// A slice of sequences [first, last) of a layout: rebased offsets, its mask bytes, and
// the token range it covers in the whole batch.
struct batch_slice {
  std::vector<std::int64_t> offsets;
  std::vector<std::uint8_t> mask;
  std::size_t token_begin = 0;
  std::size_t token_end = 0;

  [[nodiscard]] token_layout layout() const { return token_layout(offsets, mask); }
  template <class V>
  [[nodiscard]] std::span<const V> of(const std::vector<V>& whole) const {
    return std::span<const V>(whole).subspan(token_begin, token_end - token_begin);
  }
  template <class V>
  [[nodiscard]] std::span<V> of_mutable(std::vector<V>& whole) const {
    return std::span<V>(whole).subspan(token_begin, token_end - token_begin);
  }
};

inline batch_slice slice_sequences(const token_layout& layout, std::size_t first, std::size_t last) {
  batch_slice slice;
  slice.token_begin = layout.begin(first);
  slice.token_end = last == first ? slice.token_begin : layout.end(last - 1);
  for (std::size_t s = first; s <= last; ++s)
    slice.offsets.push_back(static_cast<std::int64_t>(layout.begin(s) - slice.token_begin));
  if (layout.has_mask())
    slice.mask.assign(layout.mask().begin() + static_cast<std::ptrdiff_t>(slice.token_begin),
                      layout.mask().begin() + static_cast<std::ptrdiff_t>(slice.token_end));
  return slice;
}

// Splits the sequences into `parts` contiguous slices at random boundaries (a slice may
// be empty).
inline std::vector<batch_slice> random_split(const token_layout& layout, std::size_t parts,
                                             std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> cut(0, layout.sequences());
  std::vector<std::size_t> cuts{0, layout.sequences()};
  for (std::size_t k = 1; k < parts; ++k) cuts.push_back(cut(rng));
  std::sort(cuts.begin(), cuts.end());
  std::vector<batch_slice> slices;
  for (std::size_t k = 0; k + 1 < cuts.size(); ++k)
    slices.push_back(slice_sequences(layout, cuts[k], cuts[k + 1]));
  return slices;
}

// Precomputed rollout correction weights as veRL passes them (rollout_is_weights):
// min(exp(old - behaviour), 2), so that they vary and some are capped.
template <class T>
std::vector<T> rollout_is_weights_of(const random_batch<T>& batch) {
  std::vector<T> weights(batch.tokens());
  for (std::size_t t = 0; t < weights.size(); ++t)
    weights[t] =
        static_cast<T>(std::min(2.0, std::exp(static_cast<double>(batch.old_log_probs[t]) -
                                              static_cast<double>(batch.behaviour_log_probs[t]))));
  return weights;
}

}  // namespace cascade_rl::testing
