#pragma once
// The ratio losses whose token formula reads one more value of its token, as the CUDA
// kernels and the portable Thrust path run them (ratio_term over a contextual_token):
// GSPO its sequence's mean log-ratio, GMPO its row's loss and sequence SAPO its row's
// ratio and gradient (a pre-pass's value per sequence, found by binary search over the
// offsets), Clip-Cov and KL-Cov its selection
// byte. The formulas are include/cascade_rl/terms/sequence_ratio_tokens.hpp and
// covariance_tokens.hpp, which the host core calls too.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/cuda/detail/token_terms.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/covariance_tokens.hpp"
#include "cascade_rl/terms/policy_gradient_tokens.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"
#include "cascade_rl/terms/sequence_ratio_tokens.hpp"

namespace cascade_rl::cuda::detail {

// The sequence holding token t < layout.tokens: the last s with offsets[s] <= t.
CASCADE_RL_HD inline std::size_t sequence_holding(const device_token_layout& layout,
                                                  std::size_t t) {
  std::size_t lo = 0, hi = layout.sequences;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (static_cast<std::size_t>(layout.offsets[mid]) <= t)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// A token's context: the value of its sequence (one per sequence: a double, or sequence
// SAPO's row)...
template <class V = double>
struct sequence_value {
  const V* per_sequence;
  device_token_layout layout;
  CASCADE_RL_HD V operator()(std::size_t t) const {
    return per_sequence[sequence_holding(layout, t)];
  }
};

// ... or its selection byte (non-zero: selected).
struct selection_byte {
  const std::uint8_t* selected;
  CASCADE_RL_HD bool operator()(std::size_t t) const { return selected[t] != 0; }
};

// Each loss's formula at its token's context, picked by the options' type.
CASCADE_RL_HD inline terms::ppo_clip_token_result formula_at(double sequence_log_ratio,
                                                             double logp, double old_logp,
                                                             double advantage,
                                                             const gspo_options& p) {
  return terms::gspo_token(sequence_log_ratio, logp, old_logp, advantage, p);
}
// (GMPO's row loss holds the geometric mean of the given weights already.)
CASCADE_RL_HD inline terms::ppo_clip_token_result formula_at(double row_loss, double logp,
                                                             double old_logp, double advantage,
                                                             const geo_mean_options& p) {
  return terms::geo_mean_token(row_loss, logp, old_logp, advantage, p);
}
CASCADE_RL_HD inline terms::token_loss_with_kl formula_at(const terms::sequence_sapo_row& row,
                                                          double logp, double old_logp,
                                                          double advantage,
                                                          const sequence_sapo_options& p) {
  return terms::sequence_sapo_token(row, logp, old_logp, advantage, p);
}
CASCADE_RL_HD inline terms::ppo_clip_token_result formula_at(bool selected, double logp,
                                                             double old_logp, double advantage,
                                                             const clip_cov_options& p) {
  return terms::clip_cov_token(logp, old_logp, advantage, selected, p);
}
// KL-Cov: the KL penalty applies where the token is selected.
CASCADE_RL_HD inline terms::ppo_clip_token_result formula_at(bool selected, double logp,
                                                             double old_logp, double advantage,
                                                             const kl_cov_options& p) {
  return terms::kl_cov_token(logp, old_logp, advantage, selected, p.ppo_kl_coef);
}

// The token function of such a loss for ratio_term: its formula at the token's context.
template <class Options, class Context>
struct contextual_token {
  // GMPO's given weights are in its row loss: ratio_term does not apply them again.
  static constexpr bool applies_given_weights = !std::is_same_v<Options, geo_mean_options>;
  Context context;
  Options params;

  CASCADE_RL_HD auto operator()(std::size_t t, double logp, double old_logp,
                                double advantage) const {
    return formula_at(context(t), logp, old_logp, advantage, params);
  }
};

template <class T>
using gspo_term = ratio_term<T, contextual_token<gspo_options, sequence_value<>>>;
template <class T>
using geo_mean_term = ratio_term<T, contextual_token<geo_mean_options, sequence_value<>>>;
template <class T>
using sequence_sapo_term =
    ratio_term<T, contextual_token<sequence_sapo_options, sequence_value<terms::sequence_sapo_row>>>;
template <class T>
using clip_cov_term = ratio_term<T, contextual_token<clip_cov_options, selection_byte>>;
template <class T>
using kl_cov_term = ratio_term<T, contextual_token<kl_cov_options, selection_byte>>;

}  // namespace cascade_rl::cuda::detail
