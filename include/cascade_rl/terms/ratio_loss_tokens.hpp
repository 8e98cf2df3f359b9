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
  cispo_options params;
  CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE token_loss_with_kl
  operator()(double logp, double old_logp, double advantage, policy_loss_metrics& metrics) const {
    const ppo_clip_token_result r = cispo_token(logp, old_logp, advantage, params);
    count_clips(r, metrics);
    return r;
  }
};

template <dppo_divergence D>
struct dppo_ratio_token {
  dppo_options params;
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
  sapo_options params;
  CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE token_loss_with_kl operator()(double logp, double old_logp,
                                                                       double advantage,
                                                                       policy_loss_metrics&) const {
    return sapo_token(logp, old_logp, advantage, params);
  }
};

}  // namespace cascade_rl::terms

namespace cascade_rl::detail {

// The ratio losses' options as their token function (terms/ratio_loss_tokens.hpp), handed
// to f: every executor's driver is written once over the token type. DPPO's divergence
// picks one of two instantiations, so the token loop stays free of branches.
template <class F>
decltype(auto) visit_ratio_token(const cispo_options& o, F&& f) {
  return f(terms::cispo_ratio_token{o});
}
template <class F>
decltype(auto) visit_ratio_token(const dppo_options& o, F&& f) {
  if (o.divergence == dppo_divergence::binary_kl)
    return f(terms::dppo_ratio_token<dppo_divergence::binary_kl>{o});
  return f(terms::dppo_ratio_token<dppo_divergence::total_variation>{o});
}
template <class F>
decltype(auto) visit_ratio_token(const dro_options& o, F&& f) {
  return f(terms::dro_ratio_token{o.beta});
}
template <class F>
decltype(auto) visit_ratio_token(const sapo_options& o, F&& f) {
  return f(terms::sapo_ratio_token{o});
}

}  // namespace cascade_rl::detail
