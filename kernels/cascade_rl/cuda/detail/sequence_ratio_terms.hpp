#pragma once
// The sequence-level ratio losses as the CUDA kernels and the portable Thrust path read
// them: the per-sequence pre-pass and the token term, array access around the formulas
// of include/cascade_rl/terms/sequence_ratio_tokens.hpp, which the host core calls too.
// The token term finds its sequence's quantity by binary search over the offsets.

#include <cstddef>

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/cuda/detail/token_terms.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/terms/policy_gradient_tokens.hpp"
#include "cascade_rl/terms/sequence_ratio_tokens.hpp"
#include "cascade_rl/terms/token_loss.hpp"

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

// GSPO's token term: terms::gspo_token at the sequence's mean log-ratio (the pre-pass's
// sequence_log_ratio, one per sequence), as gspo_loss of the host core runs it.
template <class T>
struct gspo_term {
  const T* log_probs;
  const T* old_log_probs;
  const T* advantages;
  const T* rollout_is_weights;  // null: none
  const double* sequence_log_ratio;
  device_token_layout layout;
  gspo_options params;

  CASCADE_RL_HD terms::token_loss operator()(std::size_t t, loss_tally& tally) const {
    const terms::ppo_clip_token_result r = terms::gspo_token(
        sequence_log_ratio[sequence_holding(layout, t)], static_cast<double>(log_probs[t]),
        static_cast<double>(old_log_probs[t]), static_cast<double>(advantages[t]), params);
    tally.metrics.approx_kl_sum += r.approx_kl;
    terms::count_clips(r, tally.metrics);
    return given_weighted(terms::token_loss{r.value, r.grad}, rollout_is_weights, t);
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

// GMPO's token term: terms::geo_mean_token at the row's loss (the pre-pass's
// sequence_loss, one per sequence, the weights' geometric mean in it already), as
// geo_mean_loss of the host core runs it. rollout_is_weights are read for their
// finiteness only.
template <class T>
struct geo_mean_term {
  const T* log_probs;
  const T* old_log_probs;
  const T* advantages;
  const T* rollout_is_weights;  // null: none
  const double* sequence_loss;
  device_token_layout layout;
  geo_mean_options params;

  CASCADE_RL_HD terms::token_loss operator()(std::size_t t, loss_tally& tally) const {
    const terms::ppo_clip_token_result r = terms::geo_mean_token(
        sequence_loss[sequence_holding(layout, t)], static_cast<double>(log_probs[t]),
        static_cast<double>(old_log_probs[t]), static_cast<double>(advantages[t]), params);
    tally.metrics.approx_kl_sum += r.approx_kl;
    terms::count_clips(r, tally.metrics);
    return terms::token_loss{r.value, r.grad};
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

}  // namespace cascade_rl::cuda::detail
