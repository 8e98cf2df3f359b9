#pragma once
// The aggregation weight c_t of a valid token (see algorithms/loss_aggregation.hpp for
// the modes and why the normaliser is global): loss = sum_t c_t l_t.

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/loss_normalizer.hpp"

namespace cascade_rl {

namespace terms {

// c_t in double; `sequence_valid` (the valid tokens of t's sequence) is read by
// seq-mean-token-mean only. Callers round it to the gradient's type T once, as the
// weight that grad_out holds, and compute with that rounded value.
CASCADE_RL_HD inline double aggregation_weight(loss_aggregation mode, const loss_normalizer& n,
                                               unsigned long long sequence_valid) {
  switch (mode) {
    case loss_aggregation::token_mean: return 1.0 / n.tokens;
    case loss_aggregation::token_sum: return 1.0;
    case loss_aggregation::seq_mean_token_sum: return 1.0 / n.sequences;
    case loss_aggregation::seq_mean_token_mean:
      return sequence_valid == 0 ? 0.0
                                 : 1.0 / (static_cast<double>(sequence_valid) * n.sequences);
    case loss_aggregation::seq_mean_token_sum_norm: return 1.0 / (n.sequences * n.scale);
  }
  return 1.0;
}

}  // namespace terms
}  // namespace cascade_rl
