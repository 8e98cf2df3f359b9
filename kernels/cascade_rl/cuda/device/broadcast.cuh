#pragma once
// The CUB-shaped layer of broadcast_to_tokens and place_on_last_valid_token: size query
// with d_temp_storage == nullptr, then the run. The temporary storage holds the
// device_report (report_of): broken offsets, and for place_on_last_valid_token the first
// sequence without a valid token (first_refused).

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/broadcast.cuh"

namespace cascade_rl::cuda {
namespace detail {

template <class Tuning, class T, class Kernel>
cudaError_t run_per_sequence(void* d_temp_storage, std::size_t& temp_storage_bytes,
                             const device_token_layout& layout, Kernel kernel,
                             const T* per_sequence, T* per_token, cudaStream_t stream) {
  device_report* report = nullptr;
  if (const call_start start = begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  if (layout.sequences == 0) return cudaSuccess;
  constexpr unsigned threads = Tuning::warp_item_block_threads;
  return launch(kernel, blocks_for(layout.sequences * 32, threads), threads, stream, per_sequence, layout,
                per_token, report);
}

}  // namespace detail

template <tuning_policy Tuning = default_tuning, class T>
cudaError_t broadcast_to_tokens(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                const T* d_per_sequence, const device_token_layout& layout,
                                T* d_per_token, cudaStream_t stream = nullptr) {
  return detail::run_per_sequence<Tuning>(d_temp_storage, temp_storage_bytes, layout,
                                  detail::broadcast_kernel<Tuning, T>, d_per_sequence, d_per_token, stream);
}

// report_of(d_temp_storage)->first_refused: the first sequence with no valid token.
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t place_on_last_valid_token(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                      const T* d_per_sequence, const device_token_layout& layout,
                                      T* d_per_token, cudaStream_t stream = nullptr) {
  return detail::run_per_sequence<Tuning>(d_temp_storage, temp_storage_bytes, layout,
                                  detail::place_on_last_kernel<Tuning, T>, d_per_sequence, d_per_token,
                                  stream);
}

}  // namespace cascade_rl::cuda
