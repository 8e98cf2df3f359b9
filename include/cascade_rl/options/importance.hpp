#pragma once
// Importance sampling against the behaviour (rollout) policy, as an option of the losses
// that take it (terms/importance_weight.hpp computes the weight).

#include <string_view>
#include <tuple>

#include "cascade_rl/options/described.hpp"

namespace cascade_rl {

enum class importance_sampling {
  none,       // w_t = 1; behaviour log-probs are not read
  truncated,  // w_t = min(r_t, cap)
  band_mask,  // w_t = r_t inside [band_low, band_high], 0 outside
};

struct importance_options {
  importance_sampling mode = importance_sampling::none;
  double cap = 2.0;        // truncated: upper bound of w_t, must be > 0
  double band_low = 0.5;   // band_mask: 0 <= band_low <= band_high
  double band_high = 2.0;
};

namespace detail {

template <>
struct config_fields<importance_options> {
  using T = importance_options;
  static constexpr std::tuple list{config_field{"mode", &T::mode}, config_field{"cap", &T::cap},
                                   config_field{"band_low", &T::band_low},
                                   config_field{"band_high", &T::band_high}};
};

}  // namespace detail

}  // namespace cascade_rl
