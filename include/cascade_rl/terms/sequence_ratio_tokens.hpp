#pragma once
// The token terms of the sequence-level ratio losses, given their per-sequence quantity
// (the drivers in algorithms/sequence_ratio_losses.hpp and the CUDA and portable paths
// all call these; one copy of each formula):
//
//   sequence_mean_log_ratio  the pre-pass: (1/n) sum_t (logp_t - old_logp_t) over the
//                            sequence's n valid tokens, in index order, in double
//                            (n = 0: 0, veRL's clamp(min=1) on the length).
//   gspo_token               GSPO (arXiv 2507.18071) as in veRL compute_policy_loss_gspo:
//                            log s_t = min(logp_t - sg(logp_t) + sg(m), bound) with m the
//                            sequence's mean log-ratio, so s_t = exp(min(m, bound)) and
//                            ds_t/dlogp_t = s_t below the bound (0 above it; the mean
//                            itself is a stop-gradient, so the gradient stays local);
//                            then PPO's clip on s_t: l1 = -A s, l2 = -A clamp(s, 1 - lo,
//                            1 + hi), l = max(l1, l2), dl/dlogp = l1 where l1 is chosen.

#include <cstddef>
#include <cstdint>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/terms/policy_gradient_tokens.hpp"
#include "cascade_rl/terms/token_loss.hpp"

namespace cascade_rl::terms {

// Over the tokens [first, last) of one sequence; mask: one byte per token (non-zero
// keeps it), or null for every token valid.
template <class T>
CASCADE_RL_HD double sequence_mean_log_ratio(const T* log_probs, const T* old_log_probs,
                                             const std::uint8_t* mask, std::size_t first,
                                             std::size_t last) {
  double sum = 0;
  std::size_t n = 0;
  for (std::size_t t = first; t < last; ++t) {
    if (mask != nullptr && mask[t] == 0) continue;
    sum += static_cast<double>(log_probs[t]) - static_cast<double>(old_log_probs[t]);
    ++n;
  }
  return sum / static_cast<double>(n > 0 ? n : 1);
}

// The options of gspo_options as plain values a kernel can take by copy.
struct gspo_params {
  double clip_low = 0.2;
  double clip_high = 0.2;
  double log_ratio_bound = 10;  // the upper clamp of log s (veRL: 10; no lower clamp)
};

// Free of branches as ppo_clip_token. `clipped` is set where l2 > l1 (veRL's
// pg_clipfrac for GSPO: gt(pg_losses2, pg_losses1)); dual_clipped stays false (veRL
// reports pg_clipfrac_lower 0). approx_kl is old_logp - logp unclamped (veRL's ppo_kl).
CASCADE_RL_HD inline ppo_clip_token_result gspo_token(double sequence_log_ratio, double logp,
                                                      double old_logp, double advantage,
                                                      const gspo_params& p) {
  using math::detail::blend;
  using math::detail::mask_of;
  const std::uint64_t bounded = mask_of(sequence_log_ratio > p.log_ratio_bound);
  const double log_ratio = blend(bounded, p.log_ratio_bound, sequence_log_ratio);
  const double ratio = math::exp(log_ratio);
  const double low = 1.0 - p.clip_low;
  const double high = 1.0 + p.clip_high;
  double clipped_ratio = blend(mask_of(ratio < low), low, ratio);
  clipped_ratio = blend(mask_of(clipped_ratio > high), high, clipped_ratio);
  const double l1 = -advantage * ratio;
  const double l2 = -advantage * clipped_ratio;
  const std::uint64_t clipped = mask_of(l2 > l1);
  ppo_clip_token_result r;
  r.value = blend(clipped, l2, l1);
  // d l1 / dlogp = -A * s * ds/ds = l1 (ds/dlogp = s below the bound).
  r.grad = blend(bounded | clipped, 0.0, l1);
  r.approx_kl = old_logp - logp;
  r.clipped = (clipped & 1) != 0;
  return r;
}

}  // namespace cascade_rl::terms
