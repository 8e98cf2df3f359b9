#pragma once
// The group kernel (device/group_advantages.cuh launches it): a team of lanes per group
// checks the rewards, the team leader computes the group's moments with the host's
// terms::group_moments_of in the host's order and hands them to the team, and the team
// writes the statistics and per-sequence outputs with terms/group_advantage.hpp.
// Tuning::group_block_threads sets only how many teams a block holds (or the width of a
// whole-block team): the moments are the leader's alone, and the team reduces nothing but
// the first non-finite index (an integer minimum), so every block size gives the same bits.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/group_advantage.hpp"

namespace cascade_rl::cuda::detail {

// Lanes 0..W-1 of a team cooperate on one group (W == 0: the whole block).
template <int W>
struct group_team {
  __device__ static unsigned lane() { return W == 0 ? threadIdx.x : threadIdx.x % W; }
  __device__ static unsigned width() { return W == 0 ? blockDim.x : W; }
  __device__ static std::size_t group() {
    return W == 0 ? blockIdx.x
                  : (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / W;
  }
  template <class V, class Op>
  __device__ static V reduce(V v, Op op, unsigned char* shared) {
    if constexpr (W == 0)
      return block_reduce(v, op, shared);
    else
      return team_reduce<W>(v, op);
  }
  // The team leader's value (any trivially copyable V), for every lane.
  template <class V>
  __device__ static V from_leader(V v, unsigned char* shared) {
    static_assert(sizeof(V) <= block_reduce_bytes);
    if constexpr (W == 0) {
      __syncthreads();
      if (threadIdx.x == 0) memcpy(shared, &v, sizeof v);
      __syncthreads();
      memcpy(&v, shared, sizeof v);
      __syncthreads();
      return v;
    } else {
      constexpr int words = static_cast<int>((sizeof(V) + sizeof(unsigned) - 1) / sizeof(unsigned));
      unsigned w[words] = {};
      memcpy(w, &v, sizeof v);
      for (int k = 0; k < words; ++k) w[k] = __shfl_sync(full_warp, w[k], 0, W);
      memcpy(&v, w, sizeof v);
      return v;
    }
  }
};

struct first_of {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return b < a ? b : a;
  }
};

template <class Tuning, int W, class T>
__global__ void __launch_bounds__(Tuning::group_block_threads)
group_kernel(const T* __restrict__ rewards, device_group_layout groups, T* __restrict__ advantages,
             T* __restrict__ second, group_statistic* __restrict__ statistics, group_params p,
             device_report* report) {
  using team = group_team<W>;
  __shared__ __align__(16) unsigned char shared[32 * block_reduce_bytes];
  const std::size_t g = team::group();
  const unsigned lane = team::lane();
  const unsigned width = team::width();
  // Every lane runs every reduction (shuffles need the whole warp): an inactive or
  // broken group just has an empty range.
  std::size_t first = 0, last = 0;
  if (g < groups.groups) {
    first = groups.begin(g);
    last = groups.end(g);
    if (last <= first || last > groups.sequences || (g == 0 && first != 0)) {
      if (lane == 0) report_min(&report->first_bad_offset, g == 0 && first != 0 ? 0 : g + 1);
      first = last = 0;
    }
  }
  const std::size_t count = last - first;

  // The first NaN or infinite reward of the group (device_report::nonfinite_entry).
  unsigned long long first_bad = device_report::none;
  for (std::size_t i = first + lane; i < last; i += width) {
    const T r = rewards[i];
    if (!::cuda::std::isfinite(r)) {
      first_bad = device_report::nonfinite_entry(i, ::cuda::std::isinf(r));
      break;
    }
  }
  first_bad = team::reduce(first_bad, first_of{}, shared);

  // The moments the host core computes, by the leader in the host's order; a group with
  // a non-finite reward has only its count (terms::plan_group zeroes it).
  group_moments m;
  if (lane == 0) {
    if (count > 0 && first_bad == device_report::none)
      m = terms::group_moments_of(rewards, first, last, p.accumulation);
    m.count = count;
    m.nonfinite = first_bad != device_report::none;
  }
  m = team::from_leader(m, shared);

  if (count == 0) return;
  if (lane == 0) {
    const bool refuse_nonfinite =
        p.kind == group_kind::statistics || p.nonfinite == nonfinite_rule::error;
    if (m.nonfinite && refuse_nonfinite) report_min(&report->first_nonfinite[0], first_bad);
    if (count == 1 && p.refuse_singletons) report_min(&report->first_singleton, g);
    if (statistics != nullptr) statistics[g] = statistic_of(m, p.estimator);
  }
  if (advantages == nullptr) return;
  if (p.kind == group_kind::leave_one_out) {  // advantages: loo_mean; second: loo_std or null
    for (std::size_t i = first + lane; i < last; i += width) {
      const terms::leave_one_out_value v = terms::leave_one_out_of(rewards[i], m, p.estimator);
      advantages[i] = static_cast<T>(v.mean);
      if (second != nullptr) second[i] = static_cast<T>(v.std);
    }
    return;
  }
  const group_plan plan = plan_group(m, p);
  for (std::size_t i = first + lane; i < last; i += width)
    advantages[i] = advantage_of(rewards[i], m, plan, p);
}

}  // namespace cascade_rl::cuda::detail
