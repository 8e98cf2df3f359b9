#pragma once
// Per-sequence values onto the token layout (broadcast.hpp of the host core):
//   broadcast_to_tokens:        every valid token of sequence i gets v_i, masked ones 0;
//   place_on_last_valid_token:  v_i on the last valid token of sequence i, 0 elsewhere.
// One warp per sequence: coalesced writes, the last valid token found by a ballot per
// chunk of 32 tokens from the end. Copies only: the same bits as the host core.
//
// CUB's shape: size query with d_temp_storage == nullptr, then the run. The temporary
// storage holds the device_report (report_of): broken offsets, and for
// place_on_last_valid_token the first sequence without a valid token (first_refused).

#include <cuda_runtime.h>

#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/group_advantages.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl::cuda {
namespace detail {

inline constexpr unsigned sequence_block_threads = 256;  // 8 sequences (warps) per block

__device__ inline std::size_t warp_sequence() {
  return (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
}

template <class T>
__global__ void __launch_bounds__(sequence_block_threads)
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

template <class T>
__global__ void __launch_bounds__(sequence_block_threads)
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

template <class T, class Kernel>
cudaError_t run_per_sequence(void* d_temp_storage, std::size_t& temp_storage_bytes,
                             const device_token_layout& layout, Kernel kernel,
                             const T* per_sequence, T* per_token, cudaStream_t stream) {
  device_report* report = nullptr;
  if (const call_start start = begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  if (layout.sequences == 0) return cudaSuccess;
  return launch(kernel, blocks_for(layout.sequences * 32, sequence_block_threads), sequence_block_threads,
                stream, per_sequence, layout, per_token, report);
}

}  // namespace detail

// ---- the CUB-style layer ----------------------------------------------------------------

template <class T>
cudaError_t broadcast_to_tokens(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                const T* d_per_sequence, const device_token_layout& layout,
                                T* d_per_token, cudaStream_t stream = nullptr) {
  return detail::run_per_sequence(d_temp_storage, temp_storage_bytes, layout,
                                  detail::broadcast_kernel<T>, d_per_sequence, d_per_token, stream);
}

// report_of(d_temp_storage)->first_refused: the first sequence with no valid token.
template <class T>
cudaError_t place_on_last_valid_token(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                      const T* d_per_sequence, const device_token_layout& layout,
                                      T* d_per_token, cudaStream_t stream = nullptr) {
  return detail::run_per_sequence(d_temp_storage, temp_storage_bytes, layout,
                                  detail::place_on_last_kernel<T>, d_per_sequence, d_per_token,
                                  stream);
}

namespace detail {

template <class T>
void require_per_sequence_sizes(std::size_t per_sequence, std::size_t per_token,
                                const device_token_layout& layout) {
  cascade_rl::detail::require_size(per_sequence, layout.sequences, "per_sequence",
                                    "one per sequence of the token layout");
  cascade_rl::detail::require_size(per_token, layout.tokens, "per_token",
                                    "one per token of the token layout");
}

}  // namespace detail
}  // namespace cascade_rl::cuda

// ---- the throwing convenience layer -----------------------------------------------------
// Spans point to device memory; each call waits for its stream.

namespace cascade_rl {

template <std::floating_point T>
void broadcast_to_tokens(exec::cuda_policy policy, std::span<const T> per_sequence,
                         const cuda::device_token_layout& tokens, std::span<T> per_token) {
  cuda::detail::require_per_sequence_sizes<T>(per_sequence.size(), per_token.size(), tokens);
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::broadcast_to_tokens(temp, bytes, per_sequence.data(), tokens, per_token.data(),
                                         policy.stream);
      });
  cuda::detail::throw_if_reported(report, {});
}

// Refuses a sequence with no valid token: its value would be lost silently.
template <std::floating_point T>
void place_on_last_valid_token(exec::cuda_policy policy, std::span<const T> per_sequence,
                               const cuda::device_token_layout& tokens, std::span<T> per_token) {
  cuda::detail::require_per_sequence_sizes<T>(per_sequence.size(), per_token.size(), tokens);
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::place_on_last_valid_token(temp, bytes, per_sequence.data(), tokens,
                                               per_token.data(), policy.stream);
      });
  cuda::detail::throw_if_reported(report, {});
  if (report.first_refused != cuda::device_report::none)
    detail::fail_at("per_sequence", static_cast<std::size_t>(report.first_refused),
                    "belongs to a sequence with no valid token to carry it");
}

}  // namespace cascade_rl
