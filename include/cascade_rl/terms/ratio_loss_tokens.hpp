#pragma once
// The ratio losses (CISPO, DPPO-TV/KL, DRO, SAPO) as one callable shape, so that one host
// driver (detail::policy_ratio_loss) and one device term (cuda::detail::ratio_term) serve
// them all: token(logp, old_logp, A, metrics) returns the token's loss, d/dlogp and its
// approx_kl share, and counts the token's clips into the metrics. Each wraps its formula
// in policy_gradient_tokens.hpp; nothing here computes.

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/terms/policy_gradient_tokens.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"
#include "cascade_rl/terms/token_loss.hpp"

namespace cascade_rl::terms {

struct cispo_ratio_token {
  cispo_params params;
  CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE token_loss_with_kl
  operator()(double logp, double old_logp, double advantage, policy_loss_metrics& metrics) const {
    const ppo_clip_token_result r = cispo_token(logp, old_logp, advantage, params);
    count_clips(r, metrics);
    return r;
  }
};

template <dppo_divergence D>
struct dppo_ratio_token {
  dppo_params params;
  CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE token_loss_with_kl
  operator()(double logp, double old_logp, double advantage, policy_loss_metrics& metrics) const {
    const ppo_clip_token_result r = dppo_token<D>(logp, old_logp, advantage, params);
    count_clips(r, metrics);
    return r;
  }
};

struct dro_ratio_token {
  double beta = 0;
  CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE token_loss_with_kl operator()(double logp, double old_logp,
                                                                       double advantage,
                                                                       policy_loss_metrics&) const {
    return dro_token(logp, old_logp, advantage, beta);
  }
};

struct sapo_ratio_token {
  sapo_params params;
  CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE token_loss_with_kl operator()(double logp, double old_logp,
                                                                       double advantage,
                                                                       policy_loss_metrics&) const {
    return sapo_token(logp, old_logp, advantage, params);
  }
};

}  // namespace cascade_rl::terms
