#pragma once
// The token terms of the losses as the CUDA kernels and the portable Thrust path read
// them: array access around the formulas of include/cascade_rl/terms/, which the host
// core calls too (one copy of each formula). term(t, tally) is called for valid tokens
// only, after ++tally.metrics.valid_tokens; it returns the weighted token loss and
// d/dlogp before the aggregation weight. on_masked(t) lets a term clear its own extra
// outputs; first_nonfinite(t) names the first input, in the host core's validation
// order, that is not finite at t, and `arguments` gives those inputs' names (the device
// error reports read them from here).

#include <cuda/std/cmath>

#include <array>
#include <cstddef>
#include <type_traits>

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/loss_normalizer.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/aggregation_weight.hpp"
#include "cascade_rl/terms/importance_weight.hpp"
#include "cascade_rl/terms/kl_token.hpp"
#include "cascade_rl/terms/policy_gradient_tokens.hpp"
#include "cascade_rl/terms/policy_loss_metrics.hpp"
#include "cascade_rl/terms/ratio_loss_tokens.hpp"
#include "cascade_rl/terms/token_loss.hpp"

namespace cascade_rl::cuda::detail {

// The sums of one slice of tokens: the host core's result type itself.
using loss_tally = policy_loss_result;

struct add_tallies {
  CASCADE_RL_HD loss_tally operator()(loss_tally a, const loss_tally& b) const {
    a += b;
    return a;
  }
};

// The first argument of a token term that is not finite at a token, and what it was.
struct nonfinite_hit {
  int argument = -1;  // -1: every argument is finite
  bool infinite = false;
  // Records argument k when v is NaN or infinite; true when it did.
  template <class V>
  CASCADE_RL_HD bool check(int k, V v) {
    if (::cuda::std::isfinite(v)) return false;
    argument = k;
    infinite = ::cuda::std::isinf(v);
    return true;
  }
};

// The aggregation weight c_t as the host core applies it: computed in double, stored
// in T (grad_out holds it in the host core), then read back as double.
template <class T>
CASCADE_RL_HD inline double aggregation_weight(loss_aggregation mode, const loss_normalizer& n,
                                               unsigned long long sequence_valid) {
  return static_cast<double>(static_cast<T>(terms::aggregation_weight(mode, n, sequence_valid)));
}

// local_loss_counts of algorithms/loss_aggregation.hpp: valid tokens, and sequences with at least
// one valid token (integers: any order of addition gives the same counts).
struct valid_counts {
  unsigned long long tokens = 0;
  unsigned long long sequences = 0;
};
struct add_valid_counts {
  CASCADE_RL_HD valid_counts operator()(const valid_counts& a, const valid_counts& b) const {
    return {a.tokens + b.tokens, a.sequences + b.sequences};
  }
};
CASCADE_RL_HD inline valid_counts counts_of_sequence(unsigned long long valid) {
  return {valid, valid > 0 ? 1ull : 0ull};
}
inline loss_counts to_loss_counts(const valid_counts& c) {
  loss_counts out;
  out.tokens = static_cast<std::size_t>(c.tokens);
  out.sequences = static_cast<std::size_t>(c.sequences);
  return out;
}

// The given weights (veRL's rollout_is_weights) as the host core applies them: after the
// term, before any importance correction; null: none.
template <class T>
CASCADE_RL_HD inline terms::token_loss given_weighted(terms::token_loss l, const T* weights,
                                                      std::size_t t) {
  return weights == nullptr ? l : terms::given_weighted(l, static_cast<double>(weights[t]));
}

template <class T>
struct ppo_term {
  const T* log_probs;
  const T* old_log_probs;
  const T* advantages;
  const T* behaviour;           // read only when importance.mode != none
  const T* rollout_is_weights;  // null: none
  terms::ppo_clip_params params;
  importance_options importance;

  // The approx_kl share rides in the tally's metrics (the kernels sum it per lane in the
  // canonical order, as the host's second channel does). The given weights scale the
  // clipped loss before any importance correction, as in the host core.
  CASCADE_RL_HD terms::token_loss operator()(std::size_t t, loss_tally& tally) const {
    const double old_logp = static_cast<double>(old_log_probs[t]);
    const terms::ppo_clip_token_result r = terms::ppo_clip_token(
        static_cast<double>(log_probs[t]), old_logp, static_cast<double>(advantages[t]), params);
    tally.metrics.approx_kl_sum += r.approx_kl;
    terms::count_clips(r, tally.metrics);
    const terms::token_loss l =
        given_weighted(terms::token_loss{r.value, r.grad}, rollout_is_weights, t);
    if (importance.mode == importance_sampling::none) return l;
    return terms::importance_weighted(l, old_logp - static_cast<double>(behaviour[t]), importance,
                                      tally.metrics);
  }
  CASCADE_RL_HD void on_masked(std::size_t) const {}
  // The arguments first_nonfinite numbers, by the names the host core gives them, in its
  // order of validation.
  static constexpr std::array<const char*, 5> arguments{
      "log_probs", "old_log_probs", "advantages", "rollout_is_weights", "behaviour_log_probs"};
  CASCADE_RL_HD nonfinite_hit first_nonfinite(std::size_t t) const {
    nonfinite_hit hit;
    hit.check(0, log_probs[t]) || hit.check(1, old_log_probs[t]) || hit.check(2, advantages[t]) ||
        (rollout_is_weights != nullptr && hit.check(3, rollout_is_weights[t])) ||
        (importance.mode != importance_sampling::none && hit.check(4, behaviour[t]));
    return hit;
  }
};

template <class T>
struct reinforce_term {
  const T* log_probs;
  const T* advantages;
  const T* behaviour;           // read only when importance.mode != none
  const T* rollout_is_weights;  // null: none
  bool log_prob_surrogate;
  importance_options importance;

  CASCADE_RL_HD terms::token_loss operator()(std::size_t t, loss_tally& tally) const {
    const double logp = static_cast<double>(log_probs[t]);
    const terms::token_loss l = given_weighted(
        terms::reinforce_token(logp, static_cast<double>(advantages[t]), log_prob_surrogate),
        rollout_is_weights, t);
    if (importance.mode == importance_sampling::none) return l;
    return terms::importance_weighted(l, logp - static_cast<double>(behaviour[t]), importance,
                                      tally.metrics);
  }
  CASCADE_RL_HD void on_masked(std::size_t) const {}
  // The arguments first_nonfinite numbers, by the names the host core gives them, in its
  // order of validation.
  static constexpr std::array<const char*, 4> arguments{
      "log_probs", "advantages", "rollout_is_weights", "behaviour_log_probs"};
  CASCADE_RL_HD nonfinite_hit first_nonfinite(std::size_t t) const {
    nonfinite_hit hit;
    hit.check(0, log_probs[t]) || hit.check(1, advantages[t]) ||
        (rollout_is_weights != nullptr && hit.check(2, rollout_is_weights[t])) ||
        (importance.mode != importance_sampling::none && hit.check(3, behaviour[t]));
    return hit;
  }
};

// The arguments ratio_term's first_nonfinite numbers, by the names the host core gives
// them (one list for every ratio loss, so the throwing layer names them without a Token).
struct ratio_loss_arguments {
  static constexpr std::array<const char*, 4> arguments{"log_probs", "old_log_probs", "advantages",
                                                        "rollout_is_weights"};
};

// Whether a ratio loss's token reads its index t (a value of t's sequence, a selection
// byte): token(t, logp, old_logp, A); else token(logp, old_logp, A).
template <class Token>
inline constexpr bool reads_token_index =
    std::is_invocable_v<const Token&, std::size_t, double, double, double>;

template <class Token>
CASCADE_RL_HD auto token_result(const Token& token, std::size_t t, double logp, double old_logp,
                                double advantage) {
  if constexpr (reads_token_index<Token>)
    return token(t, logp, old_logp, advantage);
  else
    return token(logp, old_logp, advantage);
}

// Whether the given weights (rollout_is_weights) scale a ratio loss's token loss: yes,
// unless its Token says applies_given_weights = false (GMPO's row loss holds them already).
// (A variable, not a constexpr function: nvcc refuses a host constexpr call in device
// code without --expt-relaxed-constexpr.)
template <class Token>
inline constexpr bool applies_given_weights = true;
template <class Token>
  requires requires { Token::applies_given_weights; }
inline constexpr bool applies_given_weights<Token> = Token::applies_given_weights;

// Every loss of the ratio to the old policy (CISPO, DPPO, DRO, SAPO, GSPO, GMPO, Clip-Cov,
// KL-Cov): the four inputs they read and Token, the loss's own token function, as the
// host core's driver runs it. Token is one of terms/ratio_loss_tokens.hpp, or a
// contextual_token (contextual_tokens.hpp) that reads a value of its token's index; it
// returns the token's loss, d/dlogp, approx_kl and its clips where it has any.
template <class T, class Token>
struct ratio_term {
  const T* log_probs;
  const T* old_log_probs;
  const T* advantages;
  const T* rollout_is_weights;  // null: none
  Token token;

  CASCADE_RL_HD terms::token_loss operator()(std::size_t t, loss_tally& tally) const {
    const double logp = static_cast<double>(log_probs[t]);
    const double old_logp = static_cast<double>(old_log_probs[t]);
    const double advantage = static_cast<double>(advantages[t]);
    const auto r = token_result(token, t, logp, old_logp, advantage);
    terms::count_clips_if_any(r, tally.metrics);
    tally.metrics.approx_kl_sum += r.approx_kl;
    const terms::token_loss l{r.value, r.grad};
    if constexpr (applies_given_weights<Token>)
      return given_weighted(l, rollout_is_weights, t);
    else
      return l;
  }
  CASCADE_RL_HD void on_masked(std::size_t) const {}
  static constexpr std::array<const char*, 4> arguments = ratio_loss_arguments::arguments;
  CASCADE_RL_HD nonfinite_hit first_nonfinite(std::size_t t) const {
    nonfinite_hit hit;
    hit.check(0, log_probs[t]) || hit.check(1, old_log_probs[t]) || hit.check(2, advantages[t]) ||
        (rollout_is_weights != nullptr && hit.check(3, rollout_is_weights[t]));
    return hit;
  }
};

template <class T>
struct kl_term {
  const T* log_probs;
  const T* ref_log_probs;
  kl_options options;
  double coefficient;
  T* values_out;  // kl_penalty: k_t per token (0 on masked); null for kl_loss

  CASCADE_RL_HD terms::token_loss operator()(std::size_t t, loss_tally&) const {
    const terms::token_loss k = terms::kl_token(static_cast<double>(log_probs[t]),
                                                static_cast<double>(ref_log_probs[t]), options);
    if (values_out != nullptr) values_out[t] = static_cast<T>(k.value);
    return {coefficient * k.value, coefficient * k.grad};
  }
  CASCADE_RL_HD void on_masked(std::size_t t) const {
    if (values_out != nullptr) values_out[t] = T(0);
  }
  // The arguments first_nonfinite numbers, by the names the host core gives them.
  static constexpr std::array<const char*, 2> arguments{"log_probs", "ref_log_probs"};
  CASCADE_RL_HD nonfinite_hit first_nonfinite(std::size_t t) const {
    nonfinite_hit hit;
    hit.check(0, log_probs[t]) || hit.check(1, ref_log_probs[t]);
    return hit;
  }
};

template <class T>
struct aggregate_term {
  const T* token_losses;
  const T* token_grads;

  CASCADE_RL_HD terms::token_loss operator()(std::size_t t, loss_tally&) const {
    return {static_cast<double>(token_losses[t]), static_cast<double>(token_grads[t])};
  }
  CASCADE_RL_HD void on_masked(std::size_t) const {}
  // The arguments first_nonfinite numbers, by the names the host core gives them.
  static constexpr std::array<const char*, 2> arguments{"token_losses", "token_grads"};
  CASCADE_RL_HD nonfinite_hit first_nonfinite(std::size_t t) const {
    nonfinite_hit hit;
    hit.check(0, token_losses[t]) || hit.check(1, token_grads[t]);
    return hit;
  }
};

}  // namespace cascade_rl::cuda::detail
