#pragma once
// What the kernels and the portable Thrust path hold of their own: min_of and max_of.
// The rest only names the terms they call: every per-token and per-group formula is in
// include/cascade_rl/terms/, called from the kernels and from the host alike.

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/discounted_return.hpp"
#include "cascade_rl/terms/distillation_advantage.hpp"
#include "cascade_rl/terms/group_advantage.hpp"
#include "cascade_rl/terms/group_moments.hpp"
#include "cascade_rl/terms/whitening.hpp"

namespace cascade_rl::cuda::detail {

template <class T>
CASCADE_RL_HD constexpr T min_of(T a, T b) { return b < a ? b : a; }
template <class T>
CASCADE_RL_HD constexpr T max_of(T a, T b) { return a < b ? b : a; }

// ---- group advantages ---------------------------------------------------------------
// The formulas are terms/group_moments.hpp, the per-group decisions
// terms/group_advantage.hpp, where the options become group_params.

using cascade_rl::detail::group_params_of;
using cascade_rl::detail::statistic_of;
using terms::advantage_of;
using terms::group_kind;
using terms::group_moments;
using terms::group_params;
using terms::group_plan;
using terms::plan_group;

// ---- token advantages -----------------------------------------------------------------

using terms::distillation_advantage;
using terms::discounted_return;

}  // namespace cascade_rl::cuda::detail
