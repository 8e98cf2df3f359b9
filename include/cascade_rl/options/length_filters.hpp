#pragma once
// DAPO's overlong filtering and soft overlong punishment (algorithms/length_filters.hpp).

#include <cstdint>

namespace cascade_rl {

enum class overlong_mode { drop, mask, soft_penalty };

struct overlong_options {
  overlong_mode mode = overlong_mode::drop;  // read by apply_overlong only
  std::int64_t max_length = 0;               // L_max, > 0
  std::int64_t buffer_length = 0;            // L_cache, soft_penalty only: 0 < L_cache <= L_max
  double penalty_factor = 1.0;               // soft_penalty only: finite, >= 0
  bool truncated_is_overlong = true;
};

}  // namespace cascade_rl
