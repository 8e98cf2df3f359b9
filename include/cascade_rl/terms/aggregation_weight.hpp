#pragma once
// The aggregation weight c_t of a valid token (see algorithms/loss_aggregation.hpp for
// the modes and why the normaliser is global): loss = sum_t c_t l_t.

#include "cascade_rl/core/host_device.hpp"

namespace cascade_rl {

enum class loss_aggregation {
  token_mean,
  token_sum,
  seq_mean_token_sum,
  seq_mean_token_mean,
  seq_mean_token_sum_norm,
};

// The divisors of one optimizer step, made for one aggregation mode: a loss refuses a
// normaliser of another mode (a divisor that means something else). `tokens` and
// `sequences` are totals over every micro-batch and rank that contributes to the step
// (all-reduce local_loss_counts, then loss_counts::normalizer(mode)); `scale` is
// seq-mean-token-sum-norm's constant (veRL: the padded response length), which has no
// default: that mode refuses a normaliser without one. Only the fields the mode uses are
// read.
struct loss_normalizer {
  loss_aggregation mode = loss_aggregation::token_mean;
  double tokens = 0;
  double sequences = 0;
  double scale = 0;
};

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
