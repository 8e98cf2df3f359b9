#pragma once
// GRPO pass@k on the portable path: a work item per group runs the host's
// terms::passk_group.

#include "cascade_rl/algorithms/grpo_passk_advantages.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/terms/passk_advantage.hpp"

namespace cascade_rl::cuda::portable::detail {

// GRPO pass@k, one group (for_each_group): the host's terms::passk_group.
template <class T>
struct passk_rule {
  T* advantages;
  grpo_passk_options params;
  CASCADE_RL_HD void operator()(const scored_group<T>& group) const {
    terms::passk_group(group.scores, group.first, group.last, group.has_nonfinite(), params,
                       advantages);
  }
};

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

// The best sequence of each group: (r_max - r_second) [/ (std + eps)]; the others 0.
template <class ExecPolicy, class T>
void grpo_passk_advantages(ExecPolicy&& exec, const T* scores, const device_group_layout& groups,
                           T* advantages, const grpo_passk_options& options = {}) {
  cascade_rl::detail::require_passk_options(options);
  detail::for_each_group(exec, scores, groups, detail::passk_rule<T>{advantages, options});
}

}  // namespace cascade_rl::cuda::portable
