#pragma once
// Zero-variance group filtering by stream compaction: a kernel flags each group (rewards
// all equal, or a NaN/inf among them) and its sequences, then CUB's DeviceSelect
// compacts the kept sequence indices, and DeviceScan + DeviceSelect the offsets of the
// kept groups. Integer work only: the same result on every run. Also the flags alone
// (zero_variance_groups) and the gather of a per-sequence array by the kept indices
// (gather_sequences).

//
// Three layers, one file each: kernel/group_filter.cuh (the kernels),
// device/group_filter.cuh (CUB's shape: temporary storage, cudaError_t, the stream last)
// and this file, the throwing convenience overloads of the host algorithms.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/group_filters.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device/group_filter.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl::cuda::detail {

inline constexpr const char* past_the_end = "is past the end: the selection was made for a longer batch";

}  // namespace cascade_rl::cuda::detail

namespace cascade_rl {

template <std::floating_point T>
void zero_variance_groups(exec::cuda_policy policy, const cuda::device_group_layout& groups,
                          std::span<const T> rewards, std::span<std::uint8_t> flags) {
  groups.require_sequences(rewards.size(), "rewards");
  detail::require_size(flags.size(), groups.groups, "flags", "one per group");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::zero_variance_groups(temp, bytes, rewards.data(), groups, flags.data(),
                                          policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"rewards"});
}

// out[k] = in[selection.kept_sequences[k]]: in and out in device memory, the selection on
// the host (as drop_zero_variance_groups returns it); its indices are copied over.
template <class V>
void gather_sequences(exec::cuda_policy policy, const group_selection& selection,
                      std::span<const V> in, std::span<V> out) {
  const std::vector<std::size_t>& kept = selection.kept_sequences;
  detail::require_size(out.size(), kept.size(), "out", "one per kept sequence");
  for (std::size_t k = 0; k < kept.size(); ++k)
    if (kept[k] >= in.size()) detail::fail_at("in", kept[k], cuda::detail::past_the_end);
  if (kept.empty()) return;
  const cudaStream_t stream = policy.stream;
  cuda::detail::device_buffer indices(kept.size() * sizeof(std::size_t), stream);
  cuda::check(cudaMemcpyAsync(indices.data(), kept.data(), kept.size() * sizeof(std::size_t),
                              cudaMemcpyHostToDevice, stream),
              "copy");
  const auto* d_kept = static_cast<const std::size_t*>(indices.data());
  const cuda::device_report report =
      cuda::detail::run_and_report(stream, [&](void* temp, std::size_t& bytes) {
        return cuda::gather_sequences(temp, bytes, in.data(), in.size(), d_kept, kept.size(),
                                      out.data(), stream);
      });
  cuda::detail::throw_if_reported(report, {});
}

// The same with the kept indices in device memory (as the CUB-style
// drop_zero_variance_groups writes them); names an index past the end as the host does.
template <class V>
void gather_sequences(exec::cuda_policy policy, std::span<const std::int64_t> kept_sequences,
                      std::span<const V> in, std::span<V> out) {
  detail::require_size(out.size(), kept_sequences.size(), "out", "one per kept sequence");
  const cudaStream_t stream = policy.stream;
  const cuda::device_report report =
      cuda::detail::run_and_report(stream, [&](void* temp, std::size_t& bytes) {
        return cuda::gather_sequences(temp, bytes, in.data(), in.size(), kept_sequences.data(),
                                      kept_sequences.size(), out.data(), stream);
      });
  if (report.first_refused != cuda::device_report::none) {
    const std::int64_t index = cuda::detail::copy_to_host(
        kept_sequences.data() + static_cast<std::size_t>(report.first_refused), stream);
    detail::fail_at("in", static_cast<std::size_t>(index), cuda::detail::past_the_end);
  }
}

// The throwing convenience overload: rewards in device memory, the selection on the host
// (as the host core's drop_zero_variance_groups returns it).
template <std::floating_point T>
group_selection drop_zero_variance_groups(exec::cuda_policy policy,
                                          const cuda::device_group_layout& groups,
                                          std::span<const T> rewards,
                                          const zero_variance_filter_options& options = {}) {
  groups.require_sequences(rewards.size(), "rewards");
  const cudaStream_t stream = policy.stream;
  const std::size_t outputs = groups.groups + groups.sequences + groups.groups + 1 + 2;
  cuda::detail::device_buffer out(outputs * sizeof(std::int64_t), stream);
  auto* kept_sequences = static_cast<std::int64_t*>(out.data());
  auto* kept_offsets = kept_sequences + groups.sequences;
  auto* counts = kept_offsets + groups.groups + 1;
  auto* keep_group = reinterpret_cast<std::uint8_t*>(counts + 2);
  cuda::detail::throw_if_reported(
      cuda::detail::run_and_report(stream,
                                   [&](void* temp, std::size_t& bytes) {
                                     return cuda::drop_zero_variance_groups(temp, bytes, rewards.data(), groups,
                                                                            keep_group, kept_sequences, kept_offsets,
                                                                            counts, options, stream);
                                   }),
      {"rewards"});
  std::int64_t host_counts[2] = {0, 0};
  cuda::check(cudaMemcpyAsync(host_counts, counts, sizeof(host_counts), cudaMemcpyDeviceToHost, stream), "copy");
  cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  group_selection selection;
  selection.kept_groups.resize(groups.groups);
  std::vector<std::int64_t> kept(static_cast<std::size_t>(host_counts[0]));
  selection.group_offsets.resize(static_cast<std::size_t>(host_counts[1]) + 1);
  cuda::check(cudaMemcpyAsync(selection.kept_groups.data(), keep_group, groups.groups,
                              cudaMemcpyDeviceToHost, stream), "copy");
  cuda::check(cudaMemcpyAsync(kept.data(), kept_sequences, kept.size() * sizeof(std::int64_t),
                              cudaMemcpyDeviceToHost, stream), "copy");
  cuda::check(cudaMemcpyAsync(selection.group_offsets.data(), kept_offsets,
                              selection.group_offsets.size() * sizeof(std::int64_t),
                              cudaMemcpyDeviceToHost, stream), "copy");
  cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  selection.kept_sequences.assign(kept.begin(), kept.end());
  selection.dropped_sequences = groups.sequences - selection.kept_sequences.size();
  selection.dropped_groups = groups.groups - (selection.group_offsets.size() - 1);
  return selection;
}

}  // namespace cascade_rl
