#pragma once
// GPG on the portable path: the batch's non-zero scores counted, then a work item per
// group with the host's moments (terms/gpg_advantage.hpp).

#include "cascade_rl/algorithms/gpg_advantages.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/terms/gpg_advantage.hpp"

namespace cascade_rl::cuda::portable::detail {

// GPG, one group (for_each_group): the host's moments and terms::gpg_advantage with the
// batch's scale.
template <class T>
struct gpg_rule {
  T* advantages;
  double scale;
  gpg_options options;
  CASCADE_RL_HD void operator()(const scored_group<T>& group) const {
    const group_moments m = group.moments(options.accumulation);
    const terms::gpg_plan plan = terms::plan_gpg(m, options.singleton);
    for (std::size_t i = group.first; i < group.last; ++i)
      advantages[i] = terms::gpg_advantage(group.scores[i], m, plan, scale, options.accumulation);
  }
};

template <class T>
struct is_nonzero {
  const T* values;
  CASCADE_RL_HD bool operator()(std::size_t i) const { return values[i] != T(0); }
};

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

// alpha (s_i - mean_g) / f_norm per sequence, alpha = N / max(non-zero scores, 1) over the
// batch.
template <class ExecPolicy, class T>
void gpg_advantages(ExecPolicy&& exec, const T* scores, const device_group_layout& groups,
                    T* advantages, const gpg_options& options = {}) {
  cascade_rl::detail::require_gpg_options(options);
  const std::size_t n = groups.sequences;
  const unsigned long long nonzero = detail::count_indices(exec, n, detail::is_nonzero<T>{scores});
  const double scale = terms::gpg_scale(n, static_cast<std::size_t>(nonzero), options.f_norm);
  detail::for_each_group(exec, scores, groups, detail::gpg_rule<T>{advantages, scale, options});
}

}  // namespace cascade_rl::cuda::portable
