#pragma once
// The portable Thrust path's plumbing, shared by every operation in portable/: the
// includes they all need, for_each_index (one Thrust work item per index) and a group's
// moments as the host core computes them. portable.hpp says what the portable path is.

#include <thrust/copy.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/gather.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/scan.h>
#include <thrust/transform_reduce.h>

#include <cuda/std/cmath>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cascade_rl/core/canonical_sum.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/detail/token_terms.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/options/kl.hpp"
#include "cascade_rl/options/loss_normalizer.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/group_moments.hpp"

namespace cascade_rl::cuda::portable {

using detail::loss_tally;

namespace detail {

using namespace cascade_rl::cuda::detail;

template <class ExecPolicy, class F>
void for_each_index(ExecPolicy&& exec, std::size_t n, F f) {
  if (n == 0) return;
  thrust::for_each_n(exec, thrust::counting_iterator<std::size_t>(0), n, f);
}

// The moments of values[first, last) as the host core computes them
// (terms::group_moments_of); nonfinite when a value is NaN or infinite (then nothing
// else is computed).
template <class T>
CASCADE_RL_HD group_moments sequential_moments(const T* values, std::size_t first, std::size_t last,
                                               mean_accumulation accumulation) {
  for (std::size_t i = first; i < last; ++i)
    if (!::cuda::std::isfinite(values[i])) {
      group_moments m;
      m.count = last - first;
      m.nonfinite = true;
      return m;
    }
  if (first == last) return group_moments{};
  return terms::group_moments_of(values, first, last, accumulation);
}


}  // namespace detail

}  // namespace cascade_rl::cuda::portable
