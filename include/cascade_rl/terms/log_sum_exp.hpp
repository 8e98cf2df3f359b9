#pragma once
// The online log-sum-exp of a row of logits and the entropy of its softmax, in one
// canonical order that the host's vector loop (algorithms/log_probs.hpp), the portable
// Thrust path (one thread per row) and the CUDA kernel (16 threads per row) all follow,
// so that the three give the same bits.
//
// Formula (Milakov & Gimelshein 2018, online normaliser): over the values x seen so far,
// relative to the running maximum m,
//   s = sum exp(x - m),  w = sum exp(x - m) * (x - m),
// so that lse = m + log s and the entropy H = log s - w / s.
//
// Order: the row goes through in chunks of lse_chunk values. In a chunk, padded with
// -inf up to a multiple of lse_lanes, lane l (0..15) takes the values l, l + 16, ... in
// order: it keeps their maximum and then their float sums of e = exp(x - m) and of
// e * (x - m). The chunk's maximum is the lanes' maxima joined lane 0 first; when it
// grows the running maximum, the state moves to it (one double exp); the lanes' sums
// join the state in double, lane 0 first. The state (m in float, s and w in double)
// lives across chunks.
//
// The exp is Cephes expf's range reduction and degree-6 polynomial (a few ulp in float),
// vectorisable, on arguments clamped at -87 (just inside float's normal range): exp(-inf)
// gives 1.6e-38 rather than 0, below float resolution in a sum that holds exp(0) = 1.
// Logits of -inf add nothing that shows; a NaN logit makes its row NaN; results leave as
// the canonical NaN (x86 and CUDA propagate different payloads).
//
// Numerical trap: every product that feeds an addition is rounded alone
// (clear_last_bit, core/elementary_functions.hpp says why), so that neither -march with
// FMA on the host nor nvcc's contraction on the device changes the bits.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/core/vector_lanes.hpp"

namespace cascade_rl::terms {

inline constexpr std::size_t lse_lanes = 16;
inline constexpr std::size_t lse_chunk = 1024;  // floats per chunk: 4 KiB, in L1
inline constexpr float lse_floor = -87.0f;      // the exp's argument clamp
inline constexpr float minus_infinity_f = -std::numeric_limits<float>::infinity();

// The unsigned integers holding the bits of V: float here; the host's GNU vectors of
// float lanes add their specialisation beside their definition.
template <class V>
struct lane_words;
template <>
struct lane_words<float> {
  using type = std::uint32_t;
};

// e = exp(x) for x in [-87, 0] or NaN, on one float or on a vector of float lanes.
// n * 0.693359375 (9 significant bits times |n| < 2^7) and the final scaling by a power
// of two are exact, fused or not; every other product feeding a sum is rounded alone.
template <class V>
CASCADE_RL_HD inline void exp_clamped_nonpositive(const V& x, V& e) {
  using words = typename lane_words<V>::type;
  constexpr float round_magic = 12582912.0f;  // 1.5 * 2^23: n = round(x / ln 2)
  V t = x * 1.44269504088896341f;
  cascade_rl::detail::clear_last_bit(t);
  t += round_magic;
  const V n = t - round_magic;
  // The integer is read from the bits, so NaN stays defined behaviour.
  words integer;
  std::memcpy(&integer, &t, sizeof integer);
  integer -= 0x4b400000u;  // the bits of round_magic
  V r_lo = n * -2.12194440e-4f;
  cascade_rl::detail::clear_last_bit(r_lo);
  const V r = (x - n * 0.693359375f) - r_lo;
  const float coefficients[5] = {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
                                 1.6666665459e-1f, 5.0000001201e-1f};
  V p = r * 1.9875691500e-4f;
  for (int k = 0; k < 5; ++k) {
    cascade_rl::detail::clear_last_bit(p);
    p += coefficients[k];
    p *= r;
  }
  p *= r;  // p * r^2 as (p * r) * r: each product rounded alone
  cascade_rl::detail::clear_last_bit(p);
  p += r;
  p += 1.0f;
  const words scale_bits = (integer + 127u) << 23;
  V scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  e = p * scale;
}

// The two terms of one value d = x - m (d <= 0, -inf or NaN): e = exp(max(d, -87)) and
// e * max(d, -87) (clamped: never 0 * -inf; NaN stays NaN).
template <class V>
CASCADE_RL_HD inline void lse_terms(const V& d, V& e, V& e_times_d) {
  const V x = d < lse_floor ? V{} + lse_floor : d;
  exp_clamped_nonpositive(x, e);
  e_times_d = e * x;
  cascade_rl::detail::clear_last_bit(e_times_d);
}

// exp(d) for one d <= 0 or -inf, as lse_terms takes it; `clamped` receives max(d, -87).
CASCADE_RL_HD inline float exp_nonpositive(float d, float& clamped) {
  const float x = d < lse_floor ? lse_floor : d;
  clamped = x;
  float e;
  exp_clamped_nonpositive(x, e);
  return e;
}

// The larger of a running maximum and a value; NaN values are skipped.
CASCADE_RL_HD inline float lse_max(float running, float value) {
  return value > running ? value : running;
}

// A chunk's maximum from its lanes' maxima, lane 0 first; lane_at(l) gives lane l's.
template <class LaneAt>
CASCADE_RL_HD inline float max_of_lanes(LaneAt lane_at) {
  float m = lane_at(0u);
  for (unsigned l = 1; l < lse_lanes; ++l) m = lse_max(m, lane_at(l));
  return m;
}

// A chunk's sum from its lanes' float sums, in double, lane 0 first.
template <class LaneAt>
CASCADE_RL_HD inline double sum_of_lanes(LaneAt lane_at) {
  double s = 0;
  for (unsigned l = 0; l < lse_lanes; ++l) s += static_cast<double>(lane_at(l));
  return s;
}

// The running state of one row (see the file comment).
struct lse_state {
  float m = minus_infinity_f;
  double s = 0;
  double w = 0;

  [[nodiscard]] CASCADE_RL_HD double log_sum_exp() const { return static_cast<double>(m) + math::log(s); }
  [[nodiscard]] CASCADE_RL_HD double entropy() const { return math::log(s) - math::detail::quotient(w, s); }
};

// Moves the state to a chunk's maximum when that is larger than the running one.
CASCADE_RL_HD inline void lse_raise_max(lse_state& st, float chunk_max) {
  if (!(chunk_max > st.m)) return;
  if (st.m != minus_infinity_f) {
    const double d = static_cast<double>(st.m) - static_cast<double>(chunk_max);
    const double a = math::exp(d);
    st.w = a * (st.w + math::detail::product_unfused(d, st.s));
    st.s *= a;
  }
  st.m = chunk_max;
}

// After lse_raise_max: true when the chunk's sums are to be skipped because every value
// so far is -inf or NaN (the maximum skips NaN); a NaN in the chunk then makes s NaN.
CASCADE_RL_HD inline bool lse_skips_chunk(lse_state& st, bool chunk_has_nan) {
  if (st.m != minus_infinity_f) return false;
  if (chunk_has_nan) st.s = math::detail::quiet_nan;
  return true;
}

// The chunk's value at position j < padded: the logit scaled, -inf in the padding.
template <class L>
CASCADE_RL_HD inline float lse_value(const L* x, std::size_t j, std::size_t n, float inverse_temperature) {
  return j < n ? static_cast<float>(x[j]) * inverse_temperature : minus_infinity_f;
}

CASCADE_RL_HD inline std::size_t lse_padded(std::size_t n) {
  return (n + lse_lanes - 1) / lse_lanes * lse_lanes;
}

// Folds n <= lse_chunk logits (L: float or a bfloat16 type converting to float) into the
// state, one value at a time in the lanes' order: the form for one thread.
template <class L>
CASCADE_RL_HD inline void lse_fold_chunk_serial(lse_state& st, const L* x, std::size_t n,
                                                float inverse_temperature) {
  const std::size_t padded = lse_padded(n);
  float lane_max[lse_lanes];
  for (float& m : lane_max) m = minus_infinity_f;
  bool has_nan = false;
  for (std::size_t j = 0; j < padded; ++j) {
    const float v = lse_value(x, j, n, inverse_temperature);
    lane_max[j % lse_lanes] = lse_max(lane_max[j % lse_lanes], v);
    has_nan = has_nan || v != v;
  }
  lse_raise_max(st, max_of_lanes([&](unsigned l) { return lane_max[l]; }));
  if (lse_skips_chunk(st, has_nan)) return;
  float lane_s[lse_lanes] = {};
  float lane_w[lse_lanes] = {};
  for (std::size_t j = 0; j < padded; ++j) {
    const float d = lse_value(x, j, n, inverse_temperature) - st.m;
    float e, ed;
    lse_terms(d, e, ed);
    lane_s[j % lse_lanes] += e;
    lane_w[j % lse_lanes] += ed;
  }
  st.s += sum_of_lanes([&](unsigned l) { return lane_s[l]; });
  st.w += sum_of_lanes([&](unsigned l) { return lane_w[l]; });
}

// A row's results, in float with NaN canonical.
CASCADE_RL_HD inline float log_prob_of(const lse_state& st, float label_logit) {
  return math::detail::canonical_nan(static_cast<float>(static_cast<double>(label_logit) - st.log_sum_exp()));
}
CASCADE_RL_HD inline float entropy_of(const lse_state& st) {
  return math::detail::canonical_nan(static_cast<float>(st.entropy()));
}

}  // namespace cascade_rl::terms
