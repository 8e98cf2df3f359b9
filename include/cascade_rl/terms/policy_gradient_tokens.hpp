#pragma once
// The token terms of the policy-gradient losses (the drivers in algorithms/policy_loss.hpp
// and the CUDA and portable kernels all call these):
//
//   reinforce_token  l = -A * logp (log_prob surrogate) or -A (ratio surrogate, the
//                    value of -A * exp(logp - stopgrad(logp))); dl/dlogp = -A either way.
//   ppo_clip_token   PPO's clipped surrogate as in veRL compute_policy_loss_vanilla:
//                      l1 = -A r,  l2 = -A clamp(r, 1 - lo, 1 + hi),  l = max(l1, l2),
//                      dual clip (A < 0): l = min(l, -A c)   (Ye et al. 2020).
//                    d/dlogp is -A r while the unclipped branch is active and 0 once a
//                    clip (or the log-ratio clamp) is. A tie l1 == l2 has r inside the
//                    range, so both branches carry -A r and autograd's halves sum to it.
//                    At an exact tie with the dual bound we keep the full gradient where
//                    autograd would halve it (a measure-zero set).
//   cispo_token      CISPO (MiniMax-M1, arXiv 2506.13585) as in veRL
//                    compute_policy_loss_cispo: l = -sg(clamp(r, 1 - lo, 1 + hi)) * A * logp,
//                    r = exp(clamp(logp - old_logp, +-bound)); dl/dlogp = -clamp(r, ..) * A,
//                    the clipped weight being a stop-gradient (so neither clip nor clamp
//                    zeroes the gradient, unlike PPO's).
//   sapo_token       SAPO (arXiv 2511.20347) as in veRL compute_policy_loss_sapo: the soft gate
//                    g = sigmoid(tau (r - 1)) * 4 / tau replaces the clip, l = -g * A with
//                    tau = tau_pos for A > 0, tau_neg otherwise; dl/dlogp = -A * 4 s (1 - s) r
//                    (s the sigmoid), 0 where the log-ratio clamp is active.
//   dro_token        DRO as in veRL compute_policy_loss_dro: l = -(logp * A - beta/2 *
//                    (logp - old_logp)^2), no clamp; dl/dlogp = -A + beta * (logp - old_logp).
//   dppo_token       DPPO-Binary-TV / -KL (arXiv 2602.04879) as in veRL
//                    compute_policy_loss_dppo_tv / _kl: l = -A * sg(min(r, c)) * logp * m,
//                    m = 1 where the token's divergence from the old policy is within the
//                    threshold of its advantage's side (stop-gradient), else 0;
//                    dl/dlogp = -A * min(r, c) * m.

#include <cstdint>
#include <type_traits>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"
#include "cascade_rl/terms/token_loss.hpp"

namespace cascade_rl::terms {

// Branch-free (x * 1.0 == x: the value is exactly -A under the ratio surrogate), so that
// a host loop of it vectorises.
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline token_loss reinforce_token(double logp,
                                                                         double advantage,
                                                                         bool log_prob_surrogate) {
  return {-advantage * (log_prob_surrogate ? logp : 1.0), -advantage};
}

// ppo_clip_options resolved for a kernel, which cannot read the std::optional of the dual
// clip: 0 there means off.
struct ppo_clip_params {
  double clip_low = 0.2;
  double clip_high = 0.2;
  double dual_clip = 0;  // the constant c > 1; 0: off
  double log_ratio_clamp = 20;
};

// The token's loss, its -log_ratio (approx_kl, after the clamp) and which clip acted.
struct ppo_clip_token_result : token_loss_with_kl {
  bool clipped = false;
  bool dual_clipped = false;
};

// Free of branches: every choice is a bit mask (math::detail::mask_of, combined with
// & and |) and a blend, so that a host loop of it vectorises (GCC 12 turns combined
// bools and nested ?: into control flow). Clamps go one bound after the other; that
// gives the nested clamp's value because the lower bound is below the upper one
// (-bound < bound, low = 1 - clip_low < 1 <= high).
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline ppo_clip_token_result ppo_clip_token(
    double logp, double old_logp, double advantage, const ppo_clip_params& p) {
  using math::detail::blend;
  using math::detail::mask_of;
  using math::detail::parameter_mask;
  const double raw_log_ratio = logp - old_logp;
  const double bound = p.log_ratio_clamp;
  const std::uint64_t clamped = mask_of(raw_log_ratio > bound) | mask_of(raw_log_ratio < -bound);
  double log_ratio = blend(mask_of(raw_log_ratio > bound), bound, raw_log_ratio);
  log_ratio = blend(mask_of(log_ratio < -bound), -bound, log_ratio);
  const double ratio = math::exp(log_ratio);
  const double low = 1.0 - p.clip_low;
  const double high = 1.0 + p.clip_high;
  double clipped_ratio = blend(mask_of(ratio < low), low, ratio);
  clipped_ratio = blend(mask_of(clipped_ratio > high), high, clipped_ratio);
  const double l1 = -advantage * ratio;
  const double l2 = -advantage * clipped_ratio;
  const std::uint64_t clipped = mask_of(l2 > l1);
  const double clipped_loss = blend(clipped, l2, l1);
  // The dual clip bounds the loss of a negative advantage by -A c (c = 0: off).
  const double l3 = -advantage * p.dual_clip;
  const std::uint64_t dual_clipped =
      parameter_mask(p.dual_clip > 0) & mask_of(advantage < 0) & mask_of(clipped_loss > l3);
  ppo_clip_token_result r;
  r.value = blend(dual_clipped, l3, clipped_loss);
  r.grad = blend(clamped | clipped | dual_clipped, 0.0, l1);
  r.approx_kl = -log_ratio;
  r.clipped = (clipped & 1) != 0;
  r.dual_clipped = (dual_clipped & 1) != 0;
  return r;
}

// Free of branches as ppo_clip_token. `clipped` is set where the clip moved the ratio
// (veRL's pg_clipfrac for CISPO: ratio != clipped ratio, on either side); dual_clipped
// stays false.
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline ppo_clip_token_result cispo_token(
    double logp, double old_logp, double advantage, const cispo_options& p) {
  using math::detail::blend;
  using math::detail::mask_of;
  const double raw_log_ratio = logp - old_logp;
  const double bound = p.log_ratio_clamp;
  double log_ratio = blend(mask_of(raw_log_ratio > bound), bound, raw_log_ratio);
  log_ratio = blend(mask_of(log_ratio < -bound), -bound, log_ratio);
  const double ratio = math::exp(log_ratio);
  const double low = 1.0 - p.clip_low;
  const double high = 1.0 + p.clip_high;
  // `above` from the floored ratio: the same tokens (low < 1 <= high), one mask fewer,
  // and GCC 12 vectorises this form (not the one with both masks taken from `ratio`).
  const std::uint64_t below = mask_of(ratio < low);
  double clipped_ratio = blend(below, low, ratio);
  const std::uint64_t above = mask_of(clipped_ratio > high);
  clipped_ratio = blend(above, high, clipped_ratio);
  // veRL's order: (-sg(clipped) * A) * logp.
  const double weight = -clipped_ratio * advantage;
  ppo_clip_token_result r;
  r.value = weight * logp;
  r.grad = weight;
  r.approx_kl = -log_ratio;
  r.clipped = ((below | above) & 1) != 0;
  return r;
}

// Branch-free; approx_kl is PPO's (after the clamp). The sigmoid is 1 / (1 + exp(-x)):
// exp(-x) overflowing to inf for a large negative x gives s = 0, and the gradient's
// s (1 - s) is then 0, as it is for s = 1.
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline token_loss_with_kl sapo_token(double logp,
                                                                            double old_logp,
                                                                            double advantage,
                                                                            const sapo_options& p) {
  using math::detail::blend;
  using math::detail::mask_of;
  const double raw_log_ratio = logp - old_logp;
  const double bound = p.log_ratio_clamp;
  const std::uint64_t clamped = mask_of(raw_log_ratio > bound) | mask_of(raw_log_ratio < -bound);
  double log_ratio = blend(mask_of(raw_log_ratio > bound), bound, raw_log_ratio);
  log_ratio = blend(mask_of(log_ratio < -bound), -bound, log_ratio);
  const double ratio = math::exp(log_ratio);
  const double tau = blend(mask_of(advantage > 0), p.tau_pos, p.tau_neg);
  const double s = 1.0 / (1.0 + math::exp(-(tau * (ratio - 1.0))));
  const double gate = s * (4.0 / tau);
  token_loss_with_kl r;
  r.value = -gate * advantage;
  r.grad = blend(clamped, 0.0, -advantage * (4.0 * (s * (1.0 - s))) * ratio);
  r.approx_kl = -log_ratio;
  return r;
}

// approx_kl is old_logp - logp, unclamped (veRL's ppo_kl for DRO).
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline token_loss_with_kl dro_token(double logp,
                                                                           double old_logp,
                                                                           double advantage,
                                                                           double beta) {
  const double log_ratio = logp - old_logp;
  token_loss_with_kl r;
  r.value = -(logp * advantage - 0.5 * beta * (log_ratio * log_ratio));
  r.grad = -advantage + beta * log_ratio;
  r.approx_kl = -log_ratio;
  return r;
}

// Branch-free as ppo_clip_token. `clipped` is set where the trust region masks the token
// out (veRL's pg_clipfrac), `dual_clipped` where a kept token's ratio exceeds c (veRL's
// pg_clipfrac_lower for DPPO). The probabilities are exp of the unclamped log-probs, and
// the binary KL keeps veRL's 1e-8 inside its logarithm.
template <dppo_divergence D>
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline ppo_clip_token_result dppo_token(
    double logp, double old_logp, double advantage, const dppo_options& p) {
  using math::detail::blend;
  using math::detail::mask_of;
  const double raw_log_ratio = logp - old_logp;
  const double bound = p.log_ratio_clamp;
  double log_ratio = blend(mask_of(raw_log_ratio > bound), bound, raw_log_ratio);
  log_ratio = blend(mask_of(log_ratio < -bound), -bound, log_ratio);
  const double ratio = math::exp(log_ratio);
  const std::uint64_t truncated = mask_of(ratio > p.truncation);
  const double truncated_ratio = blend(truncated, p.truncation, ratio);
  const double prob = math::exp(logp);
  const double old_prob = math::exp(old_logp);
  std::uint64_t valid_positive = 0;
  std::uint64_t valid_negative = 0;
  if constexpr (D == dppo_divergence::total_variation) {
    const double difference = prob - old_prob;
    valid_positive = mask_of(difference <= p.clip_high);
    valid_negative = mask_of(difference >= -p.clip_low);
  } else {
    const double binary_kl =
        old_prob * (old_logp - logp) +
        (1.0 - old_prob) * math::log((1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8));
    valid_positive = mask_of(binary_kl <= p.clip_high) | mask_of(prob <= old_prob);
    valid_negative = mask_of(binary_kl <= p.clip_low) | mask_of(prob >= old_prob);
  }
  const std::uint64_t positive = mask_of(advantage > 0);
  const std::uint64_t valid = (positive & valid_positive) | (~positive & valid_negative);
  // veRL's order: ((-A * sg(min(r, c))) * logp) * m.
  const double weight = blend(valid, -advantage * truncated_ratio, 0.0);
  ppo_clip_token_result r;
  r.value = blend(valid, -advantage * truncated_ratio * logp, 0.0);
  r.grad = weight;
  r.approx_kl = -log_ratio;
  r.clipped = (~valid & 1) != 0;
  r.dual_clipped = (truncated & valid & 1) != 0;
  return r;
}

// The clips of a token counted into the metrics (veRL's pg_clipfrac and
// pg_clipfrac_lower are their fractions).
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline void count_clips(const ppo_clip_token_result& r,
                                                               policy_loss_metrics& metrics) {
  metrics.clipped += r.clipped;
  metrics.dual_clipped += r.dual_clipped;
}

// The same for any token result: a loss whose result has no clips counts none.
template <class R>
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline void count_clips_if_any(const R& r,
                                                                      policy_loss_metrics& metrics) {
  if constexpr (std::is_base_of_v<ppo_clip_token_result, R>) count_clips(r, metrics);
}

}  // namespace cascade_rl::terms

namespace cascade_rl::detail {

// The options as the plain values terms::ppo_clip_token takes.
inline terms::ppo_clip_params ppo_params_of(const ppo_clip_options& options) {
  return {options.clip_low, options.clip_high, options.dual_clip ? *options.dual_clip : 0.0,
          options.log_ratio_clamp};
}

}  // namespace cascade_rl::detail
