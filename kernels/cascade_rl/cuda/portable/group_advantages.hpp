#pragma once
// Group statistics, GRPO / Dr. GRPO and RLOO advantages and leave-one-out statistics on
// the portable path: one Thrust work item per group, reduced sequentially as the host
// core reduces it.

#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/terms/group_advantage.hpp"

namespace cascade_rl::cuda::portable::detail {

// One group, sequentially, as the host core reduces it.
template <class T>
struct group_functor {
  const T* rewards;
  device_group_layout groups;
  T* advantages;                 // null: statistics only
  group_statistic* statistics;   // null: not wanted
  group_params p;

  CASCADE_RL_HD void operator()(std::size_t g) const {
    const std::size_t first = groups.begin(g);
    const std::size_t last = groups.end(g);
    const group_moments m = sequential_moments(rewards, first, last, p.accumulation);
    if (statistics != nullptr) statistics[g] = statistic_of(m, p.estimator);
    if (advantages == nullptr) return;
    const group_plan plan = plan_group(m, p);
    for (std::size_t i = first; i < last; ++i) advantages[i] = advantage_of(rewards[i], m, plan, p);
  }
};

// leave_one_out_statistics of the host core, one group.
template <class T>
struct leave_one_out_functor {
  const T* rewards;
  device_group_layout groups;
  T* loo_mean;
  T* loo_std;  // null: not wanted
  std_estimator estimator;

  CASCADE_RL_HD void operator()(std::size_t g) const {
    const std::size_t first = groups.begin(g);
    const std::size_t last = groups.end(g);
    const group_moments m =
        sequential_moments(rewards, first, last, mean_accumulation::double_precision);
    for (std::size_t i = first; i < last; ++i) {
      const terms::leave_one_out_value v = terms::leave_one_out_of(rewards[i], m, estimator);
      loo_mean[i] = static_cast<T>(v.mean);
      if (loo_std != nullptr) loo_std[i] = static_cast<T>(v.std);
    }
  }
};

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

template <class ExecPolicy, class T>
void group_statistics(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                      group_statistic* statistics, const group_statistics_options& options = {}) {
  detail::for_each_index(exec, groups.groups,
                         detail::group_functor<T>{rewards, groups, nullptr, statistics,
                                                  detail::group_params_of(options)});
}

// statistics may be null; when given, it receives each group's statistics computed under
// the advantage's own accumulation and estimator.
template <class ExecPolicy, class T>
void grpo_advantages(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                     T* advantages, group_statistic* statistics, const grpo_options& options = {}) {
  detail::for_each_index(exec, groups.groups,
                         detail::group_functor<T>{rewards, groups, advantages, statistics,
                                                  detail::group_params_of(options)});
}

template <class ExecPolicy, class T>
void rloo_advantages(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                     T* advantages, group_statistic* statistics, const rloo_options& options = {}) {
  detail::for_each_index(exec, groups.groups,
                         detail::group_functor<T>{rewards, groups, advantages, statistics,
                                                  detail::group_params_of(options)});
}

// Per sequence, the mean and (when loo_std is not null) the std of the other rewards of
// its group (groups of at least 2).
template <class ExecPolicy, class T>
void leave_one_out_statistics(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                              T* loo_mean, T* loo_std, const leave_one_out_options& options = {}) {
  detail::for_each_index(exec, groups.groups,
                         detail::leave_one_out_functor<T>{
                             rewards, groups, loo_mean, loo_std, options.estimator});
}

}  // namespace cascade_rl::cuda::portable
