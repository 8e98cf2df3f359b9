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
//   sequence_sapo_row_of     TRL's SAPO at sequence level, the pre-pass: the row's ratio
//                            s = exp(m) and the gradient every valid token of the row
//                            receives, (sum over the row of d(-A_t g_t)/ds) s / n, g_t =
//                            sigmoid(tau_t (s - 1)) 4 / tau_t (TRL's log-ratio mean is
//                            over the row's n valid tokens, so ds/dlogp_t = s / n; every
//                            aggregation weight is constant along a row, so the row's sum
//                            is exact).
//   sequence_sapo_token      the token pass: value -A_t g_t, gradient the row's.
//   geo_mean_sequence_loss   GMPO (arXiv 2507.20673) as in veRL compute_policy_loss_geo_mean,
//                            the pre-pass: l_i = -mean(A) exp(mean(k_t)) [exp(mean(log(w_t
//                            + 1e-10)))] over the sequence's valid tokens, k_t the token's
//                            log-ratio clipped on its advantage's side (geo_mean_log_ratio).
//   geo_mean_token           the token pass: value l_i (each valid token carries its row's
//                            loss, so an aggregation weight constant along the row, as every
//                            mode's is, weighs the row by its tokens), d/dlogp_t = l_i g_t:
//                            dl_i/dlogp_t = l_i dk_t/dlogp_t / n, and the n tokens' weights c
//                            sum to n c, so the mean's 1/n cancels. g_t = 1 unless the clip
//                            holds k_t (A > 0 above clip_high, A < 0 below -clip_low) or
//                            A = 0 (veRL's sign(A) zeroes k_t).

#include <cstddef>
#include <cstdint>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/policy_losses.hpp"
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

// Free of branches as ppo_clip_token. `clipped` is set where l2 > l1 (veRL's
// pg_clipfrac for GSPO: gt(pg_losses2, pg_losses1)); dual_clipped stays false (veRL
// reports pg_clipfrac_lower 0). approx_kl is old_logp - logp unclamped (veRL's ppo_kl).
CASCADE_RL_HD inline ppo_clip_token_result gspo_token(double sequence_log_ratio, double logp,
                                                      double old_logp, double advantage,
                                                      const gspo_options& p) {
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

// A token's log-ratio k = sign(A) min(sign(A) x, sign(A) clamp(x, -clip_low, clip_high)),
// x = logp - old_logp (veRL's negative_approx_kl_min): for A > 0 min(x, clamp(x)), for
// A < 0 max(x, clamp(x)), for A = 0 zero. `passes` is the mask of dk/dx = 1 (else 0; at
// an edge x == bound both branches carry 1, as autograd's halves do). `above` / `below`:
// x beyond clip_high / -clip_low (veRL's clipped, x != clamp(x)).
struct geo_mean_log_ratio {
  double value = 0;
  std::uint64_t passes = 0;
  std::uint64_t above = 0;
  std::uint64_t below = 0;
};

CASCADE_RL_HD inline geo_mean_log_ratio geo_mean_log_ratio_of(double logp, double old_logp,
                                                              double advantage,
                                                              const geo_mean_options& p) {
  using math::detail::blend;
  using math::detail::mask_of;
  const double x = logp - old_logp;
  const std::uint64_t positive = mask_of(advantage > 0);
  const std::uint64_t negative = mask_of(advantage < 0);
  geo_mean_log_ratio k;
  k.above = mask_of(x > p.clip_high);
  k.below = mask_of(x < -p.clip_low);
  const std::uint64_t held_high = positive & k.above;
  const std::uint64_t held_low = negative & k.below;
  double value = blend(held_high, p.clip_high, x);
  value = blend(held_low, -p.clip_low, value);
  k.value = blend(positive | negative, value, 0.0);
  k.passes = (positive | negative) & ~(held_high | held_low);
  return k;
}

// The pre-pass over the tokens [first, last) of one sequence (mask: one byte per token,
// non-zero keeps it, or null; weights: veRL's rollout_is_weights, or null): sums in index
// order, in double; a sequence without valid tokens gets 0. The tokens' clipped
// log-ratios and the weights' logs are computed Batch at a time first, in loops of their
// own that the host's compiler vectorises (the device runs Batch = 1); the sums then run
// in index order as before, so every Batch gives the same bits.
template <std::size_t Batch = 1, class T>
CASCADE_RL_HD double geo_mean_sequence_loss(const T* log_probs, const T* old_log_probs,
                                            const T* advantages, const T* weights,
                                            const std::uint8_t* mask, std::size_t first,
                                            std::size_t last, const geo_mean_options& p) {
  double log_ratio_sum = 0;
  double advantage_sum = 0;
  double log_weight_sum = 0;
  std::size_t n = 0;
  for (std::size_t base = first; base < last; base += Batch) {
    const std::size_t stop = last - base > Batch ? base + Batch : last;
    // Masked tokens too (their values go unread), so that the loops have no branch.
    double k[Batch];
    double log_weight[Batch] = {};  // read only where weights are given
    for (std::size_t t = base; t < stop; ++t)
      k[t - base] = geo_mean_log_ratio_of(static_cast<double>(log_probs[t]),
                                          static_cast<double>(old_log_probs[t]),
                                          static_cast<double>(advantages[t]), p)
                        .value;
    if (weights != nullptr)
      for (std::size_t t = base; t < stop; ++t)
        log_weight[t - base] = math::log(static_cast<double>(weights[t]) + 1e-10);
    for (std::size_t t = base; t < stop; ++t) {
      if (mask != nullptr && mask[t] == 0) continue;
      log_ratio_sum += k[t - base];
      advantage_sum += static_cast<double>(advantages[t]);
      log_weight_sum += log_weight[t - base];  // +0.0 when no weights: the sum stays +0.0
      ++n;
    }
  }
  const double count = static_cast<double>(n > 0 ? n : 1);
  const double loss = -(advantage_sum / count) * math::exp(log_ratio_sum / count);
  return weights == nullptr ? loss : loss * math::exp(log_weight_sum / count);
}

// The token pass given the row's loss. `clipped` counts A > 0 with x beyond either bound
// (veRL's pg_clipfrac for GMPO), `dual_clipped` A < 0 likewise (pg_clipfrac_lower);
// approx_kl is old_logp - logp unclamped (ppo_kl).
CASCADE_RL_HD inline ppo_clip_token_result geo_mean_token(double sequence_loss, double logp,
                                                          double old_logp, double advantage,
                                                          const geo_mean_options& p) {
  using math::detail::blend;
  using math::detail::mask_of;
  const geo_mean_log_ratio k = geo_mean_log_ratio_of(logp, old_logp, advantage, p);
  const std::uint64_t outside = k.above | k.below;
  ppo_clip_token_result r;
  r.value = sequence_loss;
  r.grad = blend(k.passes, sequence_loss, 0.0);
  r.approx_kl = old_logp - logp;
  r.clipped = (outside & mask_of(advantage > 0) & 1) != 0;
  r.dual_clipped = (outside & mask_of(advantage < 0) & 1) != 0;
  return r;
}

// TRL's SAPO at sequence level: a row's ratio and the gradient each of its valid tokens
// receives (sequence_sapo_row_of).
struct sequence_sapo_row {
  double ratio = 1.0;
  double grad = 0.0;
};

// SAPO's gate s(x) = sigmoid(tau x) of a ratio r, x = r - 1: the sigmoid and its scale
// 4 / tau, tau picked by the advantage's sign (as sapo_token).
struct sapo_gate {
  double sigmoid;
  double scale;
};
CASCADE_RL_HD inline sapo_gate sapo_gate_of(double ratio, double advantage,
                                            const sequence_sapo_options& p) {
  const double tau = math::detail::select(advantage > 0, p.tau_pos, p.tau_neg);
  return {1.0 / (1.0 + math::exp(-(tau * (ratio - 1.0)))), 4.0 / tau};
}

// Over the tokens [first, last) of one row, in index order (mask as above). A row without
// valid tokens has ratio 1 and gradient 0. The gradient is 0, not 0 * inf, where the
// row's derivative vanishes under an overflowing ratio.
template <class T>
CASCADE_RL_HD sequence_sapo_row sequence_sapo_row_of(const T* log_probs, const T* old_log_probs,
                                                     const T* advantages, const std::uint8_t* mask,
                                                     std::size_t first, std::size_t last,
                                                     const sequence_sapo_options& p) {
  sequence_sapo_row row;
  row.ratio = math::exp(sequence_mean_log_ratio(log_probs, old_log_probs, mask, first, last));
  double slope = 0;  // the row's sum of d(-A_t g_t)/ds = -A_t 4 sigmoid (1 - sigmoid)
  std::size_t n = 0;
  for (std::size_t t = first; t < last; ++t) {
    if (mask != nullptr && mask[t] == 0) continue;
    const double advantage = static_cast<double>(advantages[t]);
    const sapo_gate g = sapo_gate_of(row.ratio, advantage, p);
    // The product rounded alone before it joins the sum (no executor fuses it).
    slope += math::product_rn(-advantage, 4.0 * (g.sigmoid * (1.0 - g.sigmoid)));
    ++n;
  }
  if (n > 0 && slope != 0) row.grad = slope * row.ratio / static_cast<double>(n);
  return row;
}

// approx_kl is old_logp - logp, unclamped (TRL has no clamp).
CASCADE_RL_HD inline token_loss_with_kl sequence_sapo_token(const sequence_sapo_row& row,
                                                            double logp, double old_logp,
                                                            double advantage,
                                                            const sequence_sapo_options& p) {
  const sapo_gate g = sapo_gate_of(row.ratio, advantage, p);
  token_loss_with_kl r;
  r.value = -(g.sigmoid * g.scale) * advantage;
  r.grad = row.grad;
  r.approx_kl = old_logp - logp;
  return r;
}

}  // namespace cascade_rl::terms
