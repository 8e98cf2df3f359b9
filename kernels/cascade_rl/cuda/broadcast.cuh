#pragma once
// Per-sequence values onto the token layout (broadcast.hpp of the host core):
//   broadcast_to_tokens:        every valid token of sequence i gets v_i, masked ones 0;
//   place_on_last_valid_token:  v_i on the last valid token of sequence i, 0 elsewhere.
// One warp per sequence: coalesced writes, the last valid token found by a ballot per
// chunk of 32 tokens from the end. Copies only: the same bits as the host core.
//
// Three layers, one file each: kernel/broadcast.cuh (the kernels),
// device/broadcast.cuh (CUB's shape: temporary storage, cudaError_t, the stream last)
// and this file, the throwing convenience overloads of the host algorithms.

#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/broadcast.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl::cuda::detail {

template <class T>
void require_per_sequence_sizes(std::size_t per_sequence, std::size_t per_token,
                                const device_token_layout& layout) {
  cascade_rl::detail::require_size(per_sequence, layout.sequences, "per_sequence",
                                    "one per sequence of the token layout");
  cascade_rl::detail::require_size(per_token, layout.tokens, "per_token",
                                    "one per token of the token layout");
}

}  // namespace cascade_rl::cuda::detail

// ---- the throwing convenience layer -----------------------------------------------------
// Spans point to device memory; each call waits for its stream.

namespace cascade_rl {

template <std::floating_point T>
void broadcast_to_tokens(exec::cuda_policy policy, const cuda::device_token_layout& tokens,
                         std::span<const T> per_sequence, std::span<T> per_token) {
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
void place_on_last_valid_token(exec::cuda_policy policy, const cuda::device_token_layout& tokens,
                               std::span<const T> per_sequence, std::span<T> per_token) {
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
