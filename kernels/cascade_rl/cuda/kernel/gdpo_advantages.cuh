#pragma once
// The GDPO kernels (device/gdpo_advantages.cuh launches them around the group kernel,
// the broadcast and the whitening): the component scores checked for NaN or infinite
// values, and a thread per sequence adding one component's advantage with its weight
// (terms/weighted_components.hpp, components in order: the host's bits).

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/terms/weighted_components.hpp"

namespace cascade_rl::cuda::detail {

template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
gdpo_check_kernel(const T* __restrict__ scores, std::size_t n, device_report* report) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n && !::cuda::std::isfinite(scores[i]))
    report_nonfinite(&report->first_nonfinite[0], i, scores[i]);
}

// sum[s] = (first ? 0 : sum[s]) + w * a[s]; on the last component, out[s] = T(sum[s]).
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
gdpo_combine_kernel(const T* __restrict__ component, std::size_t n, double weight, bool first,
                    bool last, double* __restrict__ sum, T* __restrict__ out) {
  const std::size_t s = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const double acc = terms::add_weighted_component(first ? 0.0 : sum[s], weight,
                                                   static_cast<double>(component[s]));
  sum[s] = acc;
  if (last) out[s] = static_cast<T>(acc);
}

}  // namespace cascade_rl::cuda::detail
