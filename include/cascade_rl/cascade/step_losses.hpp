#pragma once
// The losses an engine step calls, each behind a function template of one fixed
// signature (exec::par, spans; the engine calls them with float only, and the bypass
// mode's two are templates on T so that they can be declared extern below):
//
//   step_policy_loss<Options>   a rule's loss through policy_loss: every mini-batch
//                               rule's options, reinforce_options for the on-policy and
//                               MOPD steps
//   step_bypass_correction<T>   the bypass mode's rollout correction (its first step)
//   step_bypass_loss<T>         the bypass mode's loss on the effective mask (its second)
//
// Header-only use instantiates them wherever the engine is used, as any template. Every
// loss is instantiated and optimised in each translation unit that includes the engine
// (the update rule can hold any loss), a quarter to three fifths of such a unit's code;
// a build with several of them can compile the losses once instead: define
// CASCADE_RL_COMPILED_STEP_LOSSES in every unit and compile one unit that defines
// CASCADE_RL_INSTANTIATE_STEP_LOSSES and includes this header (src/step_losses.cpp; the
// repository's own build does this for its tests and examples, cmake/engine.cmake). The
// declarations below then keep the other units from instantiating them.

#include <cstdint>
#include <span>

#include "cascade_rl/algorithms/policy_loss_entry.hpp"
#include "cascade_rl/algorithms/rollout_correction.hpp"
#include "cascade_rl/core/exec.hpp"

namespace cascade_rl::detail {

template <class Options>
policy_loss_result step_policy_loss(const token_layout& layout, const policy_loss_inputs<float>& inputs,
                                    std::span<float> dlogp, const loss_normalizer& normalizer,
                                    const Options& options) {
  return policy_loss(exec::par, layout, inputs, dlogp, normalizer, options);
}

template <class T>
rollout_correction_metrics step_bypass_correction(const token_layout& layout, const bypass_mode_inputs<T>& inputs,
                                                  const bypass_mode_options& options, std::span<T> weights,
                                                  std::span<std::uint8_t> keep) {
  return bypass_mode_correction(exec::par, layout, inputs, options, weights, keep);
}

template <class T>
policy_loss_result step_bypass_loss(const token_layout& effective, const bypass_mode_inputs<T>& inputs,
                                    std::span<const T> weights, std::span<T> dlogp,
                                    const loss_normalizer& normalizer, const bypass_mode_options& options) {
  return bypass_mode_policy_loss(exec::par, effective, inputs, weights, dlogp, normalizer, options);
}

}  // namespace cascade_rl::detail

// Every options type an update rule can hold (stage_config.hpp's update_options::rule,
// with on_policy_update's and MOPD's reinforce_options); a rule added there and not here
// would still be instantiated where it is used, only not shared (a test compares the two).
#define CASCADE_RL_STEP_LOSS_OPTIONS(X)                                                   \
  X(reinforce_options) X(ppo_clip_options) X(cispo_options) X(dppo_options) X(dro_options) \
  X(sapo_options) X(gspo_options) X(geo_mean_options) X(clip_cov_options) X(kl_cov_options)

#if defined(CASCADE_RL_COMPILED_STEP_LOSSES) || defined(CASCADE_RL_INSTANTIATE_STEP_LOSSES)
#if defined(CASCADE_RL_INSTANTIATE_STEP_LOSSES)
#define CASCADE_RL_STEP_LOSS_INSTANCE template
#else
#define CASCADE_RL_STEP_LOSS_INSTANCE extern template
#endif

namespace cascade_rl::detail {
#define CASCADE_RL_STEP_POLICY_LOSS(Options)                                                          \
  CASCADE_RL_STEP_LOSS_INSTANCE policy_loss_result step_policy_loss<Options>(                          \
      const token_layout&, const policy_loss_inputs<float>&, std::span<float>, const loss_normalizer&, \
      const Options&);
CASCADE_RL_STEP_LOSS_OPTIONS(CASCADE_RL_STEP_POLICY_LOSS)
#undef CASCADE_RL_STEP_POLICY_LOSS
CASCADE_RL_STEP_LOSS_INSTANCE rollout_correction_metrics step_bypass_correction<float>(
    const token_layout&, const bypass_mode_inputs<float>&, const bypass_mode_options&, std::span<float>,
    std::span<std::uint8_t>);
CASCADE_RL_STEP_LOSS_INSTANCE policy_loss_result step_bypass_loss<float>(
    const token_layout&, const bypass_mode_inputs<float>&, std::span<const float>, std::span<float>,
    const loss_normalizer&, const bypass_mode_options&);
}  // namespace cascade_rl::detail

#undef CASCADE_RL_STEP_LOSS_INSTANCE
#endif
