#pragma once
// The per-sequence kernels (device/broadcast.cuh launches them): one warp per sequence,
// coalesced writes, the last valid token found by a ballot per chunk of 32 tokens from
// the end. Any block of whole warps: a sequence's work is its warp's alone.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"

namespace cascade_rl::cuda::detail {

__device__ inline std::size_t warp_sequence() {
  return (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
}

template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::warp_item_block_threads)
broadcast_kernel(const T* __restrict__ per_sequence, device_token_layout layout,
                 T* __restrict__ per_token, device_report* report) {
  const std::size_t s = warp_sequence();
  const unsigned lane = threadIdx.x % 32;
  if (s >= layout.sequences) return;  // the whole warp: no shuffle follows
  std::size_t first = 0, last = 0;
  sequence_range(layout, s, lane == 0, report, first, last);
  const T v = per_sequence[s];
  for (std::size_t t = first + lane; t < last; t += 32) per_token[t] = layout.valid(t) ? v : T(0);
}

template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::warp_item_block_threads)
place_on_last_kernel(const T* __restrict__ per_sequence, device_token_layout layout,
                     T* __restrict__ per_token, device_report* report) {
  const std::size_t s = warp_sequence();
  const unsigned lane = threadIdx.x % 32;
  if (s >= layout.sequences) return;
  std::size_t first = 0, last = 0;
  sequence_range(layout, s, lane == 0, report, first, last);
  constexpr std::size_t none = ~std::size_t{0};
  std::size_t target = none;  // the same in every lane (a ballot decides it)
  for (std::size_t end = last; end > first && target == none;) {
    const std::size_t begin = end - first > 32 ? end - 32 : first;
    const std::size_t t = begin + lane;
    const unsigned hits = __ballot_sync(full_warp, t < end && layout.valid(t));
    if (hits != 0) target = begin + static_cast<std::size_t>(31 - __clz(static_cast<int>(hits)));
    end = begin;
  }
  if (target == none && lane == 0) report_min(&report->first_refused, s);
  const T v = per_sequence[s];
  for (std::size_t t = first + lane; t < last; t += 32) per_token[t] = t == target ? v : T(0);
}

}  // namespace cascade_rl::cuda::detail
