#pragma once
// Log-probabilities of the sampled tokens and the entropy of each row's softmax, from
// logits [rows, vocab] (fp32 or bf16), every logit read from memory once.
//
//   log_probs[r] = log softmax(logits[r] / temperature)[labels[r]]
//   entropy[r]   = -sum_v p_v log p_v  of that softmax
//
// One pass per row with the online log-sum-exp of terms/log_sum_exp.hpp: the row goes
// through in chunks that stay in L1; each chunk is loaded once, its maximum taken, the
// running state moved to the new maximum when it grows (one exp per chunk), and then
// exp(x - m) summed over the chunk from cache in 16 float lanes. That file fixes the
// order, so this vector loop, the portable Thrust path and the CUDA kernel give the same
// bits; rows are independent, so exec::seq and exec::par with any thread count do too.

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>

#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/logits_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/vector_lanes.hpp"
#include "cascade_rl/terms/log_sum_exp.hpp"

namespace cascade_rl {

// bfloat16 storage: the upper 16 bits of an IEEE-754 float32 (as torch.bfloat16 and
// __nv_bfloat16 store it), so a tensor's bytes can be viewed as a span of these.
struct bfloat16 {
  std::uint16_t bits = 0;

  [[nodiscard]] static constexpr bfloat16 from_bits(std::uint16_t b) { return bfloat16{b}; }
  // Rounds to nearest, ties to even; NaN stays NaN.
  [[nodiscard]] static constexpr bfloat16 from_float(float f) {
    const auto u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
    const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return bfloat16{static_cast<std::uint16_t>((u + rounding) >> 16)};
  }
  [[nodiscard]] constexpr float to_float() const {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }
  constexpr explicit operator float() const { return to_float(); }
};
static_assert(sizeof(bfloat16) == 2);

template <class L>
concept logit_type = std::same_as<L, float> || std::same_as<L, bfloat16>;

namespace detail {

template <logit_type L>
inline float logit_value(L x) {
  if constexpr (std::same_as<L, float>)
    return x;
  else
    return x.to_float();
}

// The 16 lanes of terms/log_sum_exp.hpp are held as 16 / register_floats GNU vectors as
// wide as the target's registers (lane l is element l % register_floats of vector
// l / register_floats); the width changes the speed, not the bits. One 16-float vector
// on an AVX2 target is lowered badly (GCC 12 turns its compares and selects into scalar
// code: 0.78 GB/s of fp32 logits on one core, against 2.98 GB/s with two 8-float
// vectors; 0.80 against 1.70 GB/s with four SSE vectors on the baseline target).
using terms::lse_chunk;
using terms::lse_lanes;
using terms::lse_state;
using terms::exp_nonpositive;
inline constexpr std::size_t register_floats = register_bytes / sizeof(float);
inline constexpr std::size_t lane_vectors = lse_lanes / register_floats;
using float_lanes = float __attribute__((vector_size(register_floats * sizeof(float))));

}  // namespace detail
}  // namespace cascade_rl

template <>
struct cascade_rl::terms::lane_words<cascade_rl::detail::float_lanes> {
  using type =
      std::uint32_t __attribute__((vector_size(cascade_rl::detail::register_floats * sizeof(float))));
};

namespace cascade_rl {
namespace detail {

// GNU vectors go through helpers by reference only (core/vector_lanes.hpp says why).

// Folds n <= lse_chunk logits (scaled by inverse_temperature) into the state, in the
// order of terms/log_sum_exp.hpp.
template <logit_type L>
inline void lse_fold_chunk(lse_state& st, const L* x, std::size_t n, float inverse_temperature) {
#if defined(__CUDA_ARCH__)
  // nvcc's device pass compiles this host function without a body: device code has no
  // GNU vectors to instantiate the terms with.
  (void)st, (void)x, (void)n, (void)inverse_temperature;
#else
  alignas(64) float buffer[lse_chunk];
  const std::size_t padded = terms::lse_padded(n);
  // The values the passes below read: the logits themselves when they already are
  // floats at temperature 1 and fill whole lanes (no copy: two fewer memory operations
  // per logit), else a scaled, converted and padded copy (x * 1.0f is x).
  const float* values = buffer;
  if constexpr (std::same_as<L, float>) {
    if (inverse_temperature == 1.0f && padded == n) values = x;
  }
  if (values == buffer) {
    for (std::size_t j = 0; j < n; ++j) buffer[j] = logit_value(x[j]) * inverse_temperature;
    for (std::size_t j = n; j < padded; ++j) buffer[j] = terms::minus_infinity_f;
  }
  using lanes = float_lanes;
  constexpr std::size_t width = register_floats;
  lanes lane_max[lane_vectors];
  for (lanes& part : lane_max) part = lanes{} + terms::minus_infinity_f;
  for (std::size_t j = 0; j < padded; j += lse_lanes)
    for (std::size_t p = 0; p < lane_vectors; ++p) {
      lanes v;
      std::memcpy(&v, values + j + p * width, sizeof v);
      lane_max[p] = v > lane_max[p] ? v : lane_max[p];  // terms::lse_max, lane by lane
    }
  terms::lse_raise_max(st, terms::max_of_lanes([&](unsigned l) { return lane_max[l / width][l % width]; }));
  if (st.m == terms::minus_infinity_f) {  // the NaN scan only when it can matter
    bool has_nan = false;
    for (std::size_t j = 0; j < n; ++j) has_nan = has_nan || values[j] != values[j];
    if (terms::lse_skips_chunk(st, has_nan)) return;
  }
  lanes lane_s[lane_vectors] = {};
  lanes lane_w[lane_vectors] = {};
  const float m = st.m;
  for (std::size_t j = 0; j < padded; j += lse_lanes)
    for (std::size_t p = 0; p < lane_vectors; ++p) {
      lanes d;
      std::memcpy(&d, values + j + p * width, sizeof d);
      d -= m;
      lanes e, ed;
      terms::lse_terms(d, e, ed);
      lane_s[p] += e;
      lane_w[p] += ed;
    }
  st.s += terms::sum_of_lanes([&](unsigned l) { return lane_s[l / width][l % width]; });
  st.w += terms::sum_of_lanes([&](unsigned l) { return lane_w[l / width][l % width]; });
#endif
}

// The state of a whole row of `vocab` logits.
template <logit_type L>
inline lse_state row_lse(const L* x, std::size_t vocab, float inverse_temperature) {
  lse_state st;
  for (std::size_t v = 0; v < vocab; v += lse_chunk)
    lse_fold_chunk(st, x + v, std::min(lse_chunk, vocab - v), inverse_temperature);
  return st;
}

// Checks shared with the fused linear path: labels in [0, vocab).
template <class Policy>
void require_labels_in_range(const Policy& policy, std::span<const std::int64_t> labels,
                             std::size_t vocab) {
  const std::size_t bad = first_index_where(policy, labels.size(), [&](std::size_t i) {
    return labels[i] < 0 || static_cast<std::uint64_t>(labels[i]) >= vocab;
  });
  if (bad != no_index)
    fail_at("labels", bad,
            "is " + std::to_string(labels[bad]) + ", outside [0, vocab = " +
                std::to_string(vocab) + ")");
}

// `size` entries hold `rows` rows of layout.vocab values at layout.stride().
inline void require_logits_shape(const logits_layout& layout, std::size_t size, std::size_t rows,
                                 const char* name) {
  const std::size_t vocab = layout.vocab;
  const std::size_t row_stride = layout.stride();
  if (vocab == 0) fail("vocab", "is 0, expected at least 1");
  if (row_stride < vocab)
    fail("row_stride",
         "is " + std::to_string(row_stride) + ", smaller than vocab = " + std::to_string(vocab));
  if (rows > 0 && size < (rows - 1) * row_stride + vocab)
    fail(name, "has " + std::to_string(size) + " entries, too few for " + std::to_string(rows) +
                   " rows of " + std::to_string(vocab) + " at stride " +
                   std::to_string(row_stride));
}

inline void require_temperature(float temperature) {
  if (!(temperature > 0) || !std::isfinite(temperature))
    fail("temperature", "is " + std::to_string(temperature) + ", expected a finite value > 0");
}

}  // namespace detail

// logits: float or bfloat16 rows shaped by `layout` (core/logits_layout.hpp), one row per
// label. Writes log_probs[r] and, when entropy is not empty, entropy[r], both of the
// softmax of logits[r] / temperature. Refuses a label outside [0, vocab), naming the first.
template <exec::host_policy Policy, class Logits>
requires contiguous_sized_range<Logits> && logit_type<std::ranges::range_value_t<Logits>>
void log_probs_from_logits(const Policy& policy, const logits_layout& layout,
                           const Logits& logits_in, std::span<const std::int64_t> labels,
                           std::span<float> log_probs, std::span<float> entropy = {},
                           float temperature = 1.0f) {
  using L = std::ranges::range_value_t<Logits>;
  const std::span<const L> logits = input_span(logits_in);
  const std::size_t vocab = layout.vocab;
  const std::size_t row_stride = layout.stride();
  const std::size_t rows = labels.size();
  detail::require_logits_shape(layout, logits.size(), rows, "logits");
  detail::require_temperature(temperature);
  detail::require_size(log_probs.size(), rows, "log_probs", "one per label");
  if (!entropy.empty()) detail::require_size(entropy.size(), rows, "entropy", "one per label, or empty");
  detail::require_labels_in_range(policy, labels, vocab);

  const float inverse = 1.0f / temperature;
  detail::for_each_index(
      policy, rows,
      [&](std::size_t r) {
        const L* x = logits.data() + r * row_stride;
        const detail::lse_state st = detail::row_lse(x, vocab, inverse);
        log_probs[r] = terms::log_prob_of(st, detail::logit_value(x[labels[r]]) * inverse);
        if (!entropy.empty()) entropy[r] = terms::entropy_of(st);
      },
      /*min_parallel=*/2);
}

}  // namespace cascade_rl
