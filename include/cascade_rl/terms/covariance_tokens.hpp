#pragma once
// The token terms of veRL's covariance-selection losses (Clip-Cov and KL-Cov, Cui et al.
// 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models";
// veRL compute_policy_loss_clip_cov / _kl_cov). Both rank tokens by the centred product
//
//   cov_t = (A_t - mean A) * (logp_t - mean logp),
//
// the means taken over the valid tokens of the batch one call is given (the canonical
// sums of core/canonical_sum.hpp divided by the valid count, so every executor has the
// same means), and treat a few selected tokens differently:
//
//   clip_cov_token   PPO's clipped surrogate without dual clip or log-ratio clamp,
//                      l1 = -A r,  l2 = -A clamp(r, 1 - lo, 1 + hi),  l = max(l1, l2),
//                    times 0 on a selected token (veRL's corr, a stop-gradient mask):
//                    dl/dlogp = -A r where the unclipped branch is active and the token is
//                    not selected, else 0. A token is a candidate for selection where it
//                    is valid, PPO's clip is not active (l2 > l1 is false) and
//                    lb < cov < ub (clip_cov_candidate).
//   kl_cov_token     the unclipped surrogate -A r plus, on a selected token, a KL penalty
//                    coef |logp - old_logp| (veRL's pg_losses_kl): dl/dlogp = -A r +
//                    s coef sign(logp - old_logp), sign(0) = 0 as torch's abs backward.
//
// selection_count is both losses' number of selected tokens, max(int(ratio * valid), 1).
// KL-Cov selects the selection_count valid tokens of largest cov: the smallest
// (covariance_key(cov), index), i.e. largest cov first and among equal cov (+0 and -0
// equal) the smallest index, the order of a stable descending sort.
//
// selection_key gives our seeded selection its order (see covariance_losses.hpp): the key
// of token t under seed s is the (t + 1)-th output of SplitMix64 started at s, a function
// of (s, t) alone, so every executor ranks the candidates alike.

#include <cstddef>
#include <cstdint>

#include "cascade_rl/core/elementary_functions.hpp"
#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/policy_gradient_tokens.hpp"

namespace cascade_rl::terms {

// (A - mean A) * (logp - mean logp), veRL's order of operations.
CASCADE_RL_HD inline double covariance_term(double advantage, double logp, double mean_advantage,
                                            double mean_logp) {
  return (advantage - mean_advantage) * (logp - mean_logp);
}

// PPO's unclipped and clipped token losses as veRL's clip_cov computes them (no clamp of
// the log-ratio, no dual clip).
struct clip_cov_branches {
  double l1 = 0;
  double l2 = 0;
  double log_ratio = 0;
};

CASCADE_RL_HD inline clip_cov_branches clip_cov_branches_of(double logp, double old_logp,
                                                            double advantage,
                                                            const clip_cov_options& p) {
  using math::detail::blend;
  using math::detail::mask_of;
  clip_cov_branches b;
  b.log_ratio = logp - old_logp;
  const double ratio = math::exp(b.log_ratio);
  const double low = 1.0 - p.clip_low;
  const double high = 1.0 + p.clip_high;
  double clipped_ratio = blend(mask_of(ratio < low), low, ratio);
  clipped_ratio = blend(mask_of(clipped_ratio > high), high, clipped_ratio);
  b.l1 = -advantage * ratio;
  b.l2 = -advantage * clipped_ratio;
  return b;
}

// Whether a valid token may be selected: PPO's clip inactive and
// clip_cov_lb < cov < clip_cov_ub.
CASCADE_RL_HD inline bool clip_cov_candidate(double logp, double old_logp, double advantage,
                                             double cov, const clip_cov_options& p) {
  const clip_cov_branches b = clip_cov_branches_of(logp, old_logp, advantage, p);
  return !(b.l2 > b.l1) && (cov < p.clip_cov_ub) && (cov > p.clip_cov_lb);
}

// clip_cov_candidate as a bit mask (all ones where it holds): the same comparisons of the
// same values, combined with & and ~ so that a host loop of it vectorises.
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline std::uint64_t clip_cov_candidate_mask(
    double logp, double old_logp, double advantage, double cov, const clip_cov_options& p) {
  using math::detail::mask_of;
  const clip_cov_branches b = clip_cov_branches_of(logp, old_logp, advantage, p);
  return ~mask_of(b.l2 > b.l1) & mask_of(cov < p.clip_cov_ub) & mask_of(cov > p.clip_cov_lb);
}

// The token's loss, d/dlogp and approx_kl (old_logp - logp, unclamped: veRL's ppo_kl);
// `clipped` is set on a selected token (veRL's pg_clipfrac counts those). Branch-free.
CASCADE_RL_HD inline ppo_clip_token_result clip_cov_token(double logp, double old_logp,
                                                          double advantage, bool selected,
                                                          const clip_cov_options& p) {
  using math::detail::blend;
  using math::detail::mask_of;
  const clip_cov_branches b = clip_cov_branches_of(logp, old_logp, advantage, p);
  const std::uint64_t clipped = mask_of(b.l2 > b.l1);
  const std::uint64_t dropped = mask_of(selected);
  ppo_clip_token_result r;
  r.value = blend(dropped, 0.0, blend(clipped, b.l2, b.l1));
  r.grad = blend(clipped | dropped, 0.0, b.l1);
  r.approx_kl = -b.log_ratio;
  r.clipped = selected;
  return r;
}

// How many tokens a covariance loss selects among `valid`: veRL's clip_num (Clip-Cov) and
// k_percent_nums (KL-Cov), max(int(ratio * valid), 1) (the truncation of a non-negative
// product). veRL's KL-Cov selects none when there is no valid token; callers check that.
CASCADE_RL_HD inline std::size_t selection_count(double ratio, std::size_t valid) {
  const double scaled = ratio * static_cast<double>(valid);
  return scaled < 1.0 ? 1 : static_cast<std::size_t>(scaled);
}

// The (token + 1)-th output of SplitMix64 (Steele, Lea, Flood 2014) started at `seed`,
// except that 2^64 - 1 becomes 2^64 - 2: the top value is kept free, so that the device
// paths can mark non-candidates with it and sort every token.
CASCADE_RL_HD inline std::uint64_t selection_key(std::uint64_t seed, std::uint64_t token) {
  std::uint64_t z = seed + (token + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z == ~std::uint64_t{0} ? z - 1 : z;
}

// The key that sorts after every candidate's.
inline constexpr std::uint64_t not_a_candidate = ~std::uint64_t{0};

// KL-Cov's order as an unsigned key: a larger cov has a smaller key, +0 and -0 share one,
// and no finite cov reaches not_a_candidate (only a NaN's bits could), so a stable
// ascending sort of (key, index) puts the largest cov first and ties in index order.
CASCADE_RL_HD inline std::uint64_t covariance_key(double cov) {
  const double canonical = cov == 0.0 ? 0.0 : cov;  // -0 -> +0
  const std::uint64_t bits = math::detail::bits_of(canonical);
  constexpr std::uint64_t sign = std::uint64_t{1} << 63;
  // Ascending order of doubles as unsigned integers, then reversed.
  const std::uint64_t ascending = (bits & sign) != 0 ? ~bits : bits | sign;
  return ~ascending;
}

// KL-Cov's token: the loss, d/dlogp, approx_kl = |logp - old_logp| (veRL's ppo_kl for
// kl_cov is its masked mean) and `clipped` set on a selected token. Branch-free.
CASCADE_RL_HD inline ppo_clip_token_result kl_cov_token(double logp, double old_logp,
                                                        double advantage, bool selected,
                                                        double ppo_kl_coef) {
  using math::detail::blend;
  using math::detail::mask_of;
  const double log_ratio = logp - old_logp;
  const double ratio = math::exp(log_ratio);
  const double l1 = -advantage * ratio;
  const std::uint64_t negative = mask_of(log_ratio < 0.0);
  const double abs_kl = blend(negative, -log_ratio, log_ratio);
  const double sign = blend(negative, -1.0, blend(mask_of(log_ratio > 0.0), 1.0, 0.0));
  const std::uint64_t chosen = mask_of(selected);
  ppo_clip_token_result r;
  r.value = blend(chosen, l1 + ppo_kl_coef * abs_kl, l1);
  r.grad = blend(chosen, l1 + ppo_kl_coef * sign, l1);
  r.approx_kl = abs_kl;
  r.clipped = selected;
  return r;
}

}  // namespace cascade_rl::terms
