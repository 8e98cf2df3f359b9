#pragma once
// The kernels of the group filter (device/group_filter.cuh launches them): the flags of
// each group and its sequences are the functors of detail/group_flags.hpp (which the
// portable path runs too), one thread per group; the gather of a per-sequence array by kept indices is one thread per
// kept entry.

#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/detail/group_flags.hpp"

namespace cascade_rl::cuda::detail {

template <class I>
__device__ inline bool index_below(I index, std::size_t n) {
  if constexpr (std::is_signed_v<I>)
    if (index < 0) return false;
  return static_cast<std::size_t>(index) < n;
}

template <class Tuning, class V, class I>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
gather_kernel(const V* __restrict__ in, std::size_t in_size, const I* __restrict__ indices,
              std::size_t kept, V* __restrict__ out, device_report* report) {
  const std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= kept) return;
  const I index = indices[k];
  if (!index_below(index, in_size)) {
    report_min(&report->first_refused, k);
    return;
  }
  out[k] = in[static_cast<std::size_t>(index)];
}

}  // namespace cascade_rl::cuda::detail
