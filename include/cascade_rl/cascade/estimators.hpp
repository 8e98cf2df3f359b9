#pragma once
// Ready-made AdvantageEstimators over the core algorithms. Any callable
// (rewards, groups, advantages) works in their place.
//
// Groups of one can appear after the overlong filter drops part of a group; the
// engine's defaults give them advantage 0 instead of refusing the batch (a lone sample
// has no baseline). A stage's group_size is checked separately (>= 2 under GRPO).

#include <span>

#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"

namespace cascade_rl {

// GRPO: (r - mean) / (std + eps) per group (Cascade RL's estimator).
struct grpo_estimator {
  grpo_options options{.singleton = singleton_rule::zero_advantage};
  void operator()(std::span<const float> rewards, const group_layout& groups,
                  std::span<float> advantages) const {
    grpo_advantages(exec::par, groups, rewards, advantages, options);
  }
};

// Dr. GRPO: r - mean, without the std scaling.
struct dr_grpo_estimator {
  grpo_options options{.scale_by_std = false, .singleton = singleton_rule::zero_advantage};
  void operator()(std::span<const float> rewards, const group_layout& groups,
                  std::span<float> advantages) const {
    grpo_advantages(exec::par, groups, rewards, advantages, options);
  }
};

// RLOO: leave-one-out baseline.
struct rloo_estimator {
  rloo_options options{.singleton = singleton_rule::zero_advantage};
  void operator()(std::span<const float> rewards, const group_layout& groups,
                  std::span<float> advantages) const {
    rloo_advantages(exec::par, groups, rewards, advantages, options);
  }
};

}  // namespace cascade_rl
