#pragma once
// Group statistics, GRPO / Dr. GRPO and RLOO advantages and leave-one-out statistics on
// the portable path: one Thrust work item per group, reduced sequentially as the host
// core reduces it.

#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/terms/group_advantage.hpp"

namespace cascade_rl::cuda::portable::detail {

// GRPO / Dr. GRPO / RLOO and the group statistics, one group (for_each_group).
template <class T>
struct group_advantage_rule {
  T* advantages;                 // null: statistics only
  group_statistic* statistics;   // null: not wanted
  group_params p;

  CASCADE_RL_HD void operator()(const scored_group<T>& group) const {
    const group_moments m = group.moments(p.accumulation);
    if (statistics != nullptr) statistics[group.index] = statistic_of(m, p.estimator);
    if (advantages == nullptr) return;
    const group_plan plan = plan_group(m, p);
    for (std::size_t i = group.first; i < group.last; ++i)
      advantages[i] = advantage_of(group.scores[i], m, plan, p);
  }
};

// leave_one_out_statistics of the host core, one group (for_each_group).
template <class T>
struct leave_one_out_rule {
  T* loo_mean;
  T* loo_std;  // null: not wanted
  std_estimator estimator;

  CASCADE_RL_HD void operator()(const scored_group<T>& group) const {
    const group_moments m = group.moments(mean_accumulation::double_precision);
    for (std::size_t i = group.first; i < group.last; ++i) {
      const terms::leave_one_out_value v = terms::leave_one_out_of(group.scores[i], m, estimator);
      loo_mean[i] = static_cast<T>(v.mean);
      if (loo_std != nullptr) loo_std[i] = static_cast<T>(v.std);
    }
  }
};

// group_advantage_rule over every group: GRPO, RLOO and the statistics below, GDPO's
// components.
template <class ExecPolicy, class T>
void group_advantages(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                      T* advantages, group_statistic* statistics, const group_params& p) {
  for_each_group(exec, rewards, groups, group_advantage_rule<T>{advantages, statistics, p});
}

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

template <class ExecPolicy, class T>
void group_statistics(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                      group_statistic* statistics, const group_statistics_options& options = {}) {
  detail::group_advantages(exec, rewards, groups, static_cast<T*>(nullptr), statistics,
                           detail::group_params_of(options));
}

// statistics may be null; when given, it receives each group's statistics computed under
// the advantage's own accumulation and estimator.
template <class ExecPolicy, class T>
void grpo_advantages(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                     T* advantages, group_statistic* statistics, const grpo_options& options = {}) {
  detail::group_advantages(exec, rewards, groups, advantages, statistics,
                           detail::group_params_of(options));
}

template <class ExecPolicy, class T>
void rloo_advantages(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                     T* advantages, group_statistic* statistics, const rloo_options& options = {}) {
  detail::group_advantages(exec, rewards, groups, advantages, statistics,
                           detail::group_params_of(options));
}

// Per sequence, the mean and (when loo_std is not null) the std of the other rewards of
// its group (groups of at least 2).
template <class ExecPolicy, class T>
void leave_one_out_statistics(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                              T* loo_mean, T* loo_std, const leave_one_out_options& options = {}) {
  detail::for_each_group(exec, rewards, groups,
                         detail::leave_one_out_rule<T>{loo_mean, loo_std, options.estimator});
}

}  // namespace cascade_rl::cuda::portable
