#pragma once
// GPG on the portable path: the batch's non-zero scores counted, then a work item per
// group with the host's moments (terms/gpg_advantage.hpp).

#include "cascade_rl/algorithms/gpg_advantages.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/terms/gpg_advantage.hpp"

namespace cascade_rl::cuda::portable::detail {

// GPG, one group: the host's moments and terms::gpg_advantage with the batch's scale.
template <class T>
struct gpg_functor {
  const T* scores;
  device_group_layout groups;
  T* advantages;
  double scale;
  gpg_options options;
  CASCADE_RL_HD void operator()(std::size_t g) const {
    const std::size_t first = groups.begin(g);
    const std::size_t last = groups.end(g);
    const group_moments m = sequential_moments(scores, first, last, options.accumulation);
    const terms::gpg_plan plan = terms::plan_gpg(m, options.singleton);
    for (std::size_t i = first; i < last; ++i)
      advantages[i] = terms::gpg_advantage(scores[i], m, plan, scale, options.accumulation);
  }
};

template <class T>
struct is_nonzero {
  const T* values;
  CASCADE_RL_HD unsigned long long operator()(std::size_t i) const {
    return values[i] != T(0) ? 1 : 0;
  }
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
  const thrust::counting_iterator<std::size_t> index(0);
  const unsigned long long nonzero =
      n == 0 ? 0
             : thrust::transform_reduce(exec, index, index + n, detail::is_nonzero<T>{scores}, 0ull,
                                        thrust::plus<unsigned long long>());
  const double scale = terms::gpg_scale(n, static_cast<std::size_t>(nonzero), options.f_norm);
  detail::for_each_index(exec, groups.groups,
                         detail::gpg_functor<T>{scores, groups, advantages, scale, options});
}

}  // namespace cascade_rl::cuda::portable
