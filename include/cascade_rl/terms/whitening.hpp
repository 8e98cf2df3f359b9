#pragma once
// The batch whitening of REINFORCE++ (veRL masked_whiten) over the valid tokens:
//   mean = sum / count,  inv_scale = 1 / sqrt(squares / divisor + eps),
//   out = (x - mean) * inv_scale  (+ mean when the mean is not shifted away).
// The sums themselves run in the canonical order of each executor's driver.

#include <cstddef>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"
#include "cascade_rl/terms/group_moments.hpp"

namespace cascade_rl::terms {

// float32_rounded_sum rounds the double sum, then divides in float32.
CASCADE_RL_HD inline double whitening_mean(double sum, std::size_t count,
                                           mean_accumulation accumulation) {
  return in_float32(accumulation)
             ? static_cast<double>(static_cast<float>(sum) / static_cast<float>(count))
             : sum / static_cast<double>(count);
}

CASCADE_RL_HD inline double whitening_inv_scale(double squares, std::size_t count,
                                                std_estimator estimator, double epsilon) {
  return 1.0 / math::sqrt(squares / variance_divisor(count, estimator) + epsilon);
}

// The shift is added even when it is 0.0 (-0.0 + 0.0 is +0.0). With the mean shifted
// away, a fused d * s + 0.0 rounds as d * s + 0.0 does, so only the unshifted sum needs
// its product rounded alone.
template <class T>
CASCADE_RL_HD inline T whitened(T value, double mean, double inv_scale,
                                mean_accumulation accumulation, bool shift_mean) {
  const double d = deviation(value, mean, accumulation);
  return static_cast<T>(shift_mean ? d * inv_scale + 0.0
                                   : math::product_unfused(d, inv_scale) + mean);
}

}  // namespace cascade_rl::terms
