#pragma once
// Log-probabilities of the sampled tokens and the entropy of each row's softmax, from
// logits [rows, vocab] (fp32 or bf16), every logit read from memory once.
//
//   log_probs[r] = log softmax(logits[r] / temperature)[labels[r]]
//   entropy[r]   = -sum_v p_v log p_v  of that softmax
//
// One pass per row with an online log-sum-exp (Milakov & Gimelshein 2018): the row goes
// through in chunks that stay in L1; each chunk is loaded once, its maximum taken, the
// running state moved to the new maximum when it grows (one exp per chunk), and then
// exp(x - max) summed over the chunk from cache. Over the values seen so far, relative
// to the running maximum m:
//   s = sum exp(x - m),  w = sum exp(x - m) * (x - m),
// so that lse = m + log s and the entropy H = log s - w / s. The chunk sums run in 16
// float lanes (vectorisable, a fixed order), the running state in double.
// The exp is a vectorisable polynomial (Cephes expf: a few ulp in float), since the
// row is bandwidth-bound only if the exp is cheap. Logits of -inf add nothing; a NaN
// logit makes its row NaN. Rows are independent and each is reduced by one thread in a
// fixed order, so results are the same bits under exec::seq and exec::par with any
// thread count (for a given build: the kernels/ CUDA and portable paths use their own
// exp and order, and agree within float tolerance).

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <type_traits>

#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/vector_lanes.hpp"

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

// The chunk sums run in 16 float lanes: their order, and so the result, is the same
// whatever the target. The lanes are held as 16 / register_floats GNU vectors as wide as
// the target's registers (lane l is element l % register_floats of vector
// l / register_floats): one 16-float vector on an AVX2 target is lowered badly (GCC 12
// turns its compares and selects into scalar code: 0.78 GB/s of fp32 logits on one
// core, against 2.98 GB/s with two 8-float vectors; 0.80 against 1.70 GB/s with four
// SSE vectors on the baseline target).
inline constexpr std::size_t lse_lanes = 16;
#if defined(__AVX512F__)
inline constexpr std::size_t register_floats = 16;
#elif defined(__AVX__)
inline constexpr std::size_t register_floats = 8;
#else
inline constexpr std::size_t register_floats = 4;
#endif
inline constexpr std::size_t lane_vectors = lse_lanes / register_floats;
using float_lanes = float __attribute__((vector_size(register_floats * sizeof(float))));
using bit_lanes = std::uint32_t __attribute__((vector_size(register_floats * sizeof(float))));

// The unsigned integers holding the bits of a float or of a vector of float lanes.
template <class V>
using bits_of_lanes = std::conditional_t<std::is_same_v<V, float>, std::uint32_t, bit_lanes>;

// GNU vectors go through these helpers by reference only (core/vector_lanes.hpp says
// why); products that feed a sum are unfused there with clear_last_bit.

// e = exp(x) for x in [-87, 0] or NaN, on one float or on a vector of lanes: Cephes
// expf's range reduction and degree-6 polynomial, a few ulp. Products that feed a sum are
// unfused; n * 0.693359375 (9 significant bits times |n| < 2^7) and the final scaling by
// a power of two are exact, fused or not.
template <class V>
inline void exp_clamped_nonpositive(const V& x, V& e) {
  constexpr float round_magic = 12582912.0f;  // 1.5 * 2^23: n = round(x / ln 2)
  V t = x * 1.44269504088896341f;
  clear_last_bit(t);
  t += round_magic;
  const V n = t - round_magic;
  // The integer is read from the bits, so NaN stays defined behaviour.
  bits_of_lanes<V> integer;
  std::memcpy(&integer, &t, sizeof integer);
  integer -= std::bit_cast<std::uint32_t>(round_magic);
  V r_lo = n * -2.12194440e-4f;
  clear_last_bit(r_lo);
  const V r = (x - n * 0.693359375f) - r_lo;
  V p = r * 1.9875691500e-4f;
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
                        1.6666665459e-1f, 5.0000001201e-1f}) {
    clear_last_bit(p);
    p += c;
    p *= r;
  }
  p *= r;  // p * r^2 as (p * r) * r: each product rounded alone
  clear_last_bit(p);
  p += r;
  p += 1.0f;
  const bits_of_lanes<V> scale_bits = (integer + 127u) << 23;
  V scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  e = p * scale;
}

// exp(d) for d <= 0 or -inf (the argument of an online log-sum-exp), branch-free so
// that a loop of it vectorises. d is clamped at -87 (just inside float's normal range),
// so exp(-inf) gives 1.6e-38 rather than 0: below float resolution in a sum that holds
// exp(0) = 1. NaN gives NaN. `clamped` receives max(d, -87) (NaN for NaN).
inline float exp_nonpositive(float d, float& clamped) {
  const float x = d < -87.0f ? -87.0f : d;
  clamped = x;
  float e;
  exp_clamped_nonpositive(x, e);
  return e;
}

// The running state of one row (see the file comment).
struct lse_state {
  float m = -std::numeric_limits<float>::infinity();
  double s = 0;
  double w = 0;

  [[nodiscard]] double log_sum_exp() const { return static_cast<double>(m) + std::log(s); }
  [[nodiscard]] double entropy() const { return std::log(s) - w / s; }
};

inline constexpr std::size_t lse_chunk = 1024;  // floats per chunk: 4 KiB, in L1

// Folds n <= lse_chunk logits (scaled by inverse_temperature) into the state.
template <logit_type L>
inline void lse_fold_chunk(lse_state& st, const L* x, std::size_t n, float inverse_temperature) {
  constexpr float minus_inf = -std::numeric_limits<float>::infinity();
  alignas(64) float buffer[lse_chunk];
  const std::size_t padded = (n + lse_lanes - 1) / lse_lanes * lse_lanes;
  // The values the passes below read: the logits themselves when they already are
  // floats at temperature 1 and fill whole lanes (no copy: two fewer memory operations
  // per logit), else a scaled, converted and padded copy.
  const float* values = buffer;
  if constexpr (std::same_as<L, float>) {
    if (inverse_temperature == 1.0f && padded == n) values = x;
  }
  if (values == buffer) {
    for (std::size_t j = 0; j < n; ++j) buffer[j] = logit_value(x[j]) * inverse_temperature;
    for (std::size_t j = n; j < padded; ++j) buffer[j] = minus_inf;
  }
  using lanes = float_lanes;
  constexpr std::size_t width = register_floats;
  lanes lane_max[lane_vectors];
  for (lanes& part : lane_max) {
    part = lanes{};
    part -= std::numeric_limits<float>::infinity();
  }
  for (std::size_t j = 0; j < padded; j += lse_lanes)
    for (std::size_t p = 0; p < lane_vectors; ++p) {
      lanes v;
      std::memcpy(&v, values + j + p * width, sizeof v);
      lane_max[p] = v > lane_max[p] ? v : lane_max[p];
    }
  float chunk_max = lane_max[0][0];
  for (std::size_t l = 1; l < lse_lanes; ++l) {
    const float lane = lane_max[l / width][l % width];
    chunk_max = lane > chunk_max ? lane : chunk_max;
  }

  if (chunk_max > st.m) {
    if (st.m != minus_inf) {
      const double d = static_cast<double>(st.m) - static_cast<double>(chunk_max);
      const double a = math::exp(d);
      st.w = a * (st.w + math::product_unfused(d, st.s));
      st.s *= a;
    }
    st.m = chunk_max;
  }
  if (st.m == minus_inf) {  // every value so far is -inf, or NaN (which the max skips)
    for (std::size_t j = 0; j < n; ++j)
      if (values[j] != values[j]) st.s = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  lanes lane_s[lane_vectors] = {};
  lanes lane_w[lane_vectors] = {};
  const float m = st.m;
  for (std::size_t j = 0; j < padded; j += lse_lanes)
    for (std::size_t p = 0; p < lane_vectors; ++p) {
      lanes d;
      std::memcpy(&d, values + j + p * width, sizeof d);
      d -= m;
      const lanes x = d < -87.0f ? lanes{} - 87.0f : d;  // exp_nonpositive's clamp
      lanes e;
      exp_clamped_nonpositive(x, e);
      lane_s[p] += e;
      lanes ex = e * x;  // x clamped: never 0 * -inf (NaN stays NaN)
      clear_last_bit(ex);
      lane_w[p] += ex;
    }
  double s = 0, w = 0;
  for (std::size_t l = 0; l < lse_lanes; ++l) {
    s += static_cast<double>(lane_s[l / width][l % width]);
    w += static_cast<double>(lane_w[l / width][l % width]);
  }
  st.s += s;
  st.w += w;
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

inline void require_temperature(float temperature) {
  if (!(temperature > 0) || !std::isfinite(temperature))
    fail("temperature", "is " + std::to_string(temperature) + ", expected a finite value > 0");
}

}  // namespace detail

// logits: rows of `vocab` values, row r at logits[r * row_stride] (row_stride >= vocab;
// padded rows are fine); one row per label. Writes log_probs[r] and, when entropy is not
// empty, entropy[r], both of the softmax of logits[r] / temperature. Refuses a label
// outside [0, vocab), naming the first.
template <exec::host_policy Policy, logit_type L>
void log_probs_from_logits(const Policy& policy, std::span<const L> logits, std::size_t vocab,
                           std::size_t row_stride, std::span<const std::int64_t> labels,
                           std::span<float> log_probs, std::span<float> entropy,
                           float temperature = 1.0f) {
  const std::size_t rows = labels.size();
  if (vocab == 0) detail::fail("vocab", "is 0, expected at least 1");
  if (row_stride < vocab)
    detail::fail("row_stride", "is " + std::to_string(row_stride) + ", smaller than vocab = " +
                                   std::to_string(vocab));
  detail::require_temperature(temperature);
  if (rows > 0 && logits.size() < (rows - 1) * row_stride + vocab)
    detail::fail("logits", "has " + std::to_string(logits.size()) + " entries, too few for " +
                               std::to_string(rows) + " rows of " + std::to_string(vocab) +
                               " at stride " + std::to_string(row_stride));
  detail::require_size(log_probs.size(), rows, "log_probs", "one per label");
  if (!entropy.empty()) detail::require_size(entropy.size(), rows, "entropy", "one per label, or empty");
  detail::require_labels_in_range(policy, labels, vocab);

  const float inverse = 1.0f / temperature;
  detail::for_each_index(
      policy, rows,
      [&](std::size_t r) {
        const L* x = logits.data() + r * row_stride;
        const detail::lse_state st = detail::row_lse(x, vocab, inverse);
        const double label_logit =
            static_cast<double>(detail::logit_value(x[labels[r]]) * inverse);
        log_probs[r] = static_cast<float>(label_logit - st.log_sum_exp());
        if (!entropy.empty()) entropy[r] = static_cast<float>(st.entropy());
      },
      /*min_parallel=*/2);
}

}  // namespace cascade_rl
