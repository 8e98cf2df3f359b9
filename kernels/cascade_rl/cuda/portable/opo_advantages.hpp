#pragma once
// OPO on the portable path: the length-weighted group baseline per group
// (terms/length_weighted_baseline.hpp) in index order.

#include "cascade_rl/algorithms/opo_advantages.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/terms/length_weighted_baseline.hpp"

namespace cascade_rl::cuda::portable::detail {

// OPO, one group (for_each_group): the host's length-weighted baseline
// (terms/length_weighted_baseline.hpp) in index order, then the advantage on every token
// of the group.
template <class T>
struct opo_rule {
  device_token_layout layout;
  T* advantages;
  opo_options options;
  CASCADE_RL_HD void operator()(const scored_group<T>& group) const {
    const bool zero_group =
        group.has_nonfinite() && options.nonfinite == nonfinite_rule::zero_group;
    terms::opo_sums sums;
    if (!zero_group)
      for (std::size_t s = group.first; s < group.last; ++s)
        terms::opo_add(sums, static_cast<double>(group.scores[s]), valid_tokens_of(layout, s));
    const terms::opo_group plan = terms::opo_group_of(sums, options.singleton, zero_group);
    for (std::size_t s = group.first; s < group.last; ++s)
      for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
        advantages[t] = terms::opo_advantage(group.scores[s], plan, layout.valid(t));
  }
};

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

// score_i - (sum |o_j| s_j / sum |o_j|) over the group, on every valid token of i.
template <class ExecPolicy, class T>
void opo_advantages(ExecPolicy&& exec, const T* scores, const device_group_layout& groups,
                    const device_token_layout& layout, T* advantages, const opo_options& options) {
  detail::for_each_group(exec, scores, groups, detail::opo_rule<T>{layout, advantages, options});
}

}  // namespace cascade_rl::cuda::portable
