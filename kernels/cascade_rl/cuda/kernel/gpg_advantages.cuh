#pragma once
// The GPG kernels (device/gpg_advantages.cuh launches them): the non-zero scores counted
// per block of gpg_count_block scores and joined by one thread (integers: exact in any
// order) into the batch scale, then a thread per group computes its moments with the
// host's terms::group_moments_of and writes terms::gpg_advantage; the host's bits.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/gpg_advantage.hpp"
#include "cascade_rl/terms/group_moments.hpp"

namespace cascade_rl::cuda::detail {

// Scores a thread counts (an integer count is exact in any order). Fixed, not a tuning
// member: it sizes the temporary storage's partials, not a launch.
inline constexpr std::size_t gpg_count_block = 4096;

template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
gpg_count_kernel(const T* __restrict__ scores, std::size_t n,
                 unsigned long long* __restrict__ partials) {
  const std::size_t b = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t first = b * gpg_count_block;
  if (first >= n) return;
  const std::size_t last = first + gpg_count_block < n ? first + gpg_count_block : n;
  unsigned long long count = 0;
  for (std::size_t i = first; i < last; ++i) count += scores[i] != T(0) ? 1 : 0;
  partials[b] = count;
}

template <int = 0>
__global__ void __launch_bounds__(combine_block_threads)
gpg_scale_kernel(const unsigned long long* __restrict__ partials, std::size_t blocks, std::size_t n,
             double f_norm, double* scale) {
  if (threadIdx.x != 0) return;
  unsigned long long count = 0;
  for (std::size_t b = 0; b < blocks; ++b) count += partials[b];
  *scale = terms::gpg_scale(n, static_cast<std::size_t>(count), f_norm);
}

// Reports broken group offsets, NaN or infinite scores under nonfinite_rule::error
// (first_nonfinite[0]) and groups of one under singleton_rule::error.
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
gpg_kernel(const T* __restrict__ scores, device_group_layout groups, T* __restrict__ advantages,
       const double* scale, gpg_options options, device_report* report) {
  const std::size_t g = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t first = 0, last = 0;
  if (g >= groups.groups || !group_range(groups, g, report, first, last)) return;
  const bool nonfinite =
      scan_group_scores(scores, g, first, last, options.singleton, options.nonfinite, report);
  terms::group_moments m;
  if (nonfinite) {
    m.count = last - first;
    m.nonfinite = true;
  } else {
    m = terms::group_moments_of(scores, first, last, options.accumulation);
  }
  const terms::gpg_plan plan = terms::plan_gpg(m, options.singleton);
  const double factor = *scale;
  for (std::size_t s = first; s < last; ++s)
    advantages[s] = terms::gpg_advantage(scores[s], m, plan, factor, options.accumulation);
}

}  // namespace cascade_rl::cuda::detail
