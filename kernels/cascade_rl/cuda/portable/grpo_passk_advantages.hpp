#pragma once
// GRPO pass@k on the portable path: a work item per group runs the host's
// terms::passk_group.

#include "cascade_rl/algorithms/grpo_passk_advantages.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/terms/passk_advantage.hpp"

namespace cascade_rl::cuda::portable::detail {

// GRPO pass@k, one group: the host's terms::passk_group.
template <class T>
struct passk_functor {
  const T* scores;
  device_group_layout groups;
  T* advantages;
  grpo_passk_options params;
  CASCADE_RL_HD void operator()(std::size_t g) const {
    const std::size_t first = groups.begin(g);
    const std::size_t last = groups.end(g);
    bool bad = false;
    for (std::size_t s = first; s < last; ++s) bad = bad || !::cuda::std::isfinite(scores[s]);
    terms::passk_group(scores, first, last, bad, params, advantages);
  }
};

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

// The best sequence of each group: (r_max - r_second) [/ (std + eps)]; the others 0.
template <class ExecPolicy, class T>
void grpo_passk_advantages(ExecPolicy&& exec, const T* scores, const device_group_layout& groups,
                           T* advantages, const grpo_passk_options& options = {}) {
  cascade_rl::detail::require_passk_options(options);
  detail::for_each_index(exec, groups.groups,
                         detail::passk_functor<T>{scores, groups, advantages, options});
}

}  // namespace cascade_rl::cuda::portable
