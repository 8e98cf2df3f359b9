#pragma once
// The per-group formulas of the group-based estimators (group statistics, GRPO, RLOO,
// REINFORCE++-baseline, leave-one-out statistics) and of the batch whitening: means under
// each accumulation convention, deviations, the variance divisor, a group's sequential
// moments, the std, GRPO's divisor and the leave-one-out downdate. The host algorithms,
// the Thrust portable path and the CUDA kernels all call these.
//
// Numerical trap: every product that feeds a sum is rounded alone
// (math::product_unfused, or clear_last_bit after the product), so that neither -march
// with FMA on the host nor nvcc's contraction on the device changes the bits.
//
// The steps templated on V take a double, or on the host a GNU vector of doubles whose
// lanes are independent groups (GRPO's group tile): the same operations lane by lane, so
// the same bits. V goes by reference (core/vector_lanes.hpp says why).

#include <cstddef>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/core/vector_lanes.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"

namespace cascade_rl::terms {

CASCADE_RL_HD inline bool in_float32(mean_accumulation accumulation) {
  return accumulation != mean_accumulation::double_precision;
}

// x - mean under the chosen accumulation: in float32 the subtraction itself rounds in
// float32, as a float32 tensor op does.
template <class T>
CASCADE_RL_HD inline double deviation(T value, double mean, mean_accumulation accumulation) {
  if (in_float32(accumulation))
    return static_cast<double>(static_cast<float>(value) - static_cast<float>(mean));
  return static_cast<double>(value) - mean;
}

// The mean of n values from their double sum (in index order) or, under
// float32_sequential, their float sum in index order.
CASCADE_RL_HD inline double mean_from_sums(double sum, float float_sum, std::size_t n,
                                           mean_accumulation accumulation) {
  if (accumulation == mean_accumulation::float32_sequential)
    return static_cast<double>(float_sum / static_cast<float>(n));
  if (accumulation == mean_accumulation::float32_rounded_sum)
    return static_cast<double>(static_cast<float>(sum) / static_cast<float>(n));
  return sum / static_cast<double>(n);
}

CASCADE_RL_HD inline double variance_divisor(std::size_t n, std_estimator estimator) {
  return estimator == std_estimator::unbiased ? static_cast<double>(n) - 1.0
                                              : static_cast<double>(n);
}

// A group's moments: m2 = sum of squared deviations. zero_variance is decided on the
// data (max == min), not on a computed std: a constant group can have a non-zero
// computed std (double inputs, float32 means), and a tiny real spread must not be
// mistaken for none. min_count / max_count: how many values equal min / max, so that a
// leave-one-out statistic can tell exactly when the other values are all equal.
// nonfinite: the group holds a NaN or infinite value (the other fields are then 0).
struct group_moments {
  double mean = 0.0;
  double m2 = 0.0;
  double min = 0.0;
  double max = 0.0;
  std::size_t count = 0;
  std::size_t min_count = 0;
  std::size_t max_count = 0;
  bool zero_variance = false;
  bool nonfinite = false;
};

// m2 += d * d, the square rounded alone.
template <class V>
CASCADE_RL_HD inline void add_square(const V& d, V& m2) {
  V square = d * d;
  cascade_rl::detail::clear_last_bit(square);
  m2 += square;
}

// The moments of values[first, last), non-empty and finite, in index order: min, max
// and the double sum in one pass, the float32 sum when asked, then the squares.
template <class T>
CASCADE_RL_HD group_moments group_moments_of(const T* values, std::size_t first, std::size_t last,
                                             mean_accumulation accumulation) {
  group_moments m;
  m.count = last - first;
  m.min = m.max = static_cast<double>(values[first]);
  m.min_count = m.max_count = 1;
  double sum = m.min;
  for (std::size_t i = first + 1; i < last; ++i) {
    const double v = static_cast<double>(values[i]);
    m.min_count = v < m.min ? 1 : m.min_count + (v == m.min ? 1 : 0);
    m.max_count = m.max < v ? 1 : m.max_count + (v == m.max ? 1 : 0);
    m.min = v < m.min ? v : m.min;
    m.max = m.max < v ? v : m.max;
    sum += v;
  }
  m.zero_variance = m.min == m.max;
  if (m.zero_variance) {
    m.mean = m.min;
    return m;
  }
  float float_sum = 0.0f;
  if (accumulation == mean_accumulation::float32_sequential)
    for (std::size_t i = first; i < last; ++i) float_sum += static_cast<float>(values[i]);
  m.mean = mean_from_sums(sum, float_sum, m.count, accumulation);
  for (std::size_t i = first; i < last; ++i)
    add_square(deviation(values[i], m.mean, accumulation), m.m2);
  return m;
}

// The std of count >= 2 values from their m2.
template <class V>
CASCADE_RL_HD inline void std_of_spread(const V& m2, std::size_t count, std_estimator estimator,
                                        V& std) {
  std = m2 / variance_divisor(count, estimator);
  cascade_rl::detail::sqrt_lanes(std);
}

// The std from the moments; 0 for a group of one (whatever the estimator) and for a
// zero-variance group.
CASCADE_RL_HD inline double group_std(const group_moments& m, std_estimator estimator) {
  if (m.zero_variance || m.count < 2) return 0.0;
  double std = 0.0;
  std_of_spread(m.m2, m.count, estimator, std);
  return std;
}

// GRPO's divisor for a std, with epsilon where the options put it: std + eps (veRL,
// TRL) or sqrt(std^2 + eps).
template <class V>
CASCADE_RL_HD inline void grpo_divisor_of(const V& std, double epsilon, epsilon_placement at,
                                          V& divisor) {
  if (at == epsilon_placement::added_to_std) {
    divisor = std + epsilon;
    return;
  }
  divisor = std * std;
  cascade_rl::detail::clear_last_bit(divisor);
  divisor += epsilon;
  cascade_rl::detail::sqrt_lanes(divisor);
}

CASCADE_RL_HD inline double grpo_divisor(double std, double epsilon, epsilon_placement at) {
  double divisor = 0.0;
  grpo_divisor_of(std, epsilon, at, divisor);
  return divisor;
}

// leave_one_out_statistics for value r of a group with moments m (double-precision
// mean): the mean and std of the group's other values, by downdating the group's
// moments. A zero-variance group gives r and 0.
//
// Numerical trap: when the other values are all equal (r is the one value of its kind,
// say 0 among {1, 0, 1}), the downdated M2 is rounding noise (1.1e-16 there, a std of
// 1e-8), and an estimator that divides by std + 1e-6 turns it into an advantage of 1e6
// (NeMo-RL's GDPO with leave-one-out, whose own E[x^2] - E[x]^2 is exactly 0 there).
// That case is decided on the data, as zero_variance is: the others' mean is their
// value and their std 0.
struct leave_one_out_value {
  double mean = 0;
  double std = 0;
};

// Whether the values of the group other than r (one of them) are all equal, from the
// group's min / max counts: only two distinct values, and r the only one of its kind.
template <class T>
CASCADE_RL_HD inline bool others_constant(T r, const group_moments& m) {
  if (m.zero_variance) return true;
  if (m.min_count + m.max_count != m.count) return false;
  const double v = static_cast<double>(r);
  return (v == m.min && m.min_count == 1) || (v == m.max && m.max_count == 1);
}

template <class T>
CASCADE_RL_HD leave_one_out_value leave_one_out_of(T r, const group_moments& m,
                                                   std_estimator estimator) {
  if (m.zero_variance) return {static_cast<double>(r), 0.0};
  if (others_constant(r, m)) return {static_cast<double>(r) == m.min ? m.max : m.min, 0.0};
  const double n = static_cast<double>(m.count);
  const double d = static_cast<double>(r) - m.mean;
  leave_one_out_value out;
  out.mean = m.mean - d / (n - 1.0);
  const std::size_t others = m.count - 1;
  if (others < 2) return out;
  const double removed = d * d * n / (n - 1.0);
  const double others_m2 = m.m2 - removed > 0.0 ? m.m2 - removed : 0.0;  // max(0, .)
  out.std = math::sqrt(others_m2 / variance_divisor(others, estimator));
  return out;
}

}  // namespace cascade_rl::terms
