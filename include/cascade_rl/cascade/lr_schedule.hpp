#pragma once
// Learning-rate schedules of a stage, as a function of the step index within the stage:
//   constant        lr = peak
//   linear warm-up  lr rises linearly from `start` at step 0 to `peak` at step
//                   warmup_steps, then stays (Nemotron-Cascade 2 MOPD: 2e-7 -> 2e-6
//                   over 30 steps)
//   cosine          optional linear warm-up, then a half cosine from peak down to
//                   `floor`, reached at the stage's last step

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <string>
#include <string_view>

#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

enum class lr_shape { constant, linear_warmup, cosine };

struct lr_schedule {
  lr_shape shape = lr_shape::constant;
  double peak = 1e-6;
  double start = 0.0;             // lr at step 0 while warming up
  std::size_t warmup_steps = 0;
  double floor = 0.0;             // cosine: lr at the last step

  // The lr of step `step` (0-based) of a stage of `total_steps` steps.
  [[nodiscard]] double at(std::size_t step, std::size_t total_steps) const {
    if (step < warmup_steps)
      return start + (peak - start) * static_cast<double>(step) / static_cast<double>(warmup_steps);
    if (shape != lr_shape::cosine) return peak;
    const std::size_t last = total_steps == 0 ? 0 : total_steps - 1;
    if (last <= warmup_steps) return peak;
    const double progress =
        std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(last - warmup_steps));
    return floor + (peak - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }

  // Throws naming `field` (e.g. "stage 'mopd'.lr") unless the schedule is usable.
  void validate(std::string_view field) const {
    const std::string f(field);
    const auto positive_finite = [](double x) { return x > 0 && std::isfinite(x); };
    const auto nonneg_finite = [](double x) { return x >= 0 && std::isfinite(x); };
    if (!positive_finite(peak)) detail::fail(f + ".peak", "must be finite and > 0, got " + std::to_string(peak));
    if (!nonneg_finite(start)) detail::fail(f + ".start", "must be finite and >= 0, got " + std::to_string(start));
    if (!nonneg_finite(floor) || floor > peak)
      detail::fail(f + ".floor", "must lie in [0, peak], got " + std::to_string(floor));
    if (shape == lr_shape::linear_warmup && warmup_steps == 0)
      detail::fail(f + ".warmup_steps", "must be > 0 for a linear warm-up");
  }
};

[[nodiscard]] inline lr_schedule constant_lr(double lr) {
  return {.shape = lr_shape::constant, .peak = lr};
}
[[nodiscard]] inline lr_schedule linear_warmup_lr(double start, double peak, std::size_t warmup_steps) {
  return {.shape = lr_shape::linear_warmup, .peak = peak, .start = start, .warmup_steps = warmup_steps};
}
[[nodiscard]] inline lr_schedule cosine_lr(double peak, double floor, std::size_t warmup_steps = 0,
                                           double start = 0.0) {
  return {.shape = lr_shape::cosine, .peak = peak, .start = start, .warmup_steps = warmup_steps,
          .floor = floor};
}

}  // namespace cascade_rl
