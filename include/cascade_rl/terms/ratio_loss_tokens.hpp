#pragma once
// The ratio losses (CISPO, DPPO-TV/KL, DRO, SAPO) as one callable shape, so that one host
// driver (detail::old_policy_passes) and one device term (cuda::detail::ratio_term) serve
// them all: token(logp, old_logp, A) returns the token's loss, d/dlogp and approx_kl share,
// and its clips where it has any (a ppo_clip_token_result: the drivers count them,
// terms::count_clips_if_any). Each wraps its formula in policy_gradient_tokens.hpp;
// nothing here computes.

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/terms/policy_gradient_tokens.hpp"
#include "cascade_rl/terms/token_loss.hpp"

namespace cascade_rl::terms {

struct cispo_ratio_token {
  cispo_options params;
  CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE ppo_clip_token_result operator()(double logp,
                                                                         double old_logp,
                                                                         double advantage) const {
    return cispo_token(logp, old_logp, advantage, params);
  }
};

template <dppo_divergence D>
struct dppo_ratio_token {
  dppo_options params;
  CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE ppo_clip_token_result operator()(double logp,
                                                                         double old_logp,
                                                                         double advantage) const {
    return dppo_token<D>(logp, old_logp, advantage, params);
  }
};

struct dro_ratio_token {
  double beta = 0;
  CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE token_loss_with_kl operator()(double logp, double old_logp,
                                                                       double advantage) const {
    return dro_token(logp, old_logp, advantage, beta);
  }
};

struct sapo_ratio_token {
  sapo_options params;
  CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE token_loss_with_kl operator()(double logp, double old_logp,
                                                                       double advantage) const {
    return sapo_token(logp, old_logp, advantage, params);
  }
};

}  // namespace cascade_rl::terms

namespace cascade_rl::detail {

// The ratio losses' options as their token function (above), handed to f: every
// executor's driver is written once over the token type. DPPO's divergence picks one of
// two instantiations, so the token loop stays free of branches.
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

// Whether Options is a token-local ratio loss's (visit_ratio_token takes it).
struct any_ratio_token {
  template <class Token>
  int operator()(const Token&) const {
    return 0;
  }
};
template <class Options>
concept token_ratio_options =
    requires(const Options& o) { visit_ratio_token(o, any_ratio_token{}); };

}  // namespace cascade_rl::detail
