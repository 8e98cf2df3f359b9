#pragma once
// Zero-variance group filtering by stream compaction: a kernel flags each group (rewards
// all equal, or a NaN/inf among them) and its sequences, then CUB's DeviceSelect
// compacts the kept sequence indices, and DeviceScan + DeviceSelect the offsets of the
// kept groups. Integer work only: the same result on every run.

#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <cuda_runtime.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/group_filters.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/group_advantages.cuh"
#include "cascade_rl/cuda/portable.hpp"

namespace cascade_rl::cuda {

// Writes d_keep_group[groups.groups], the input indices of the kept sequences
// (d_kept_sequences, capacity groups.sequences), the offsets of the kept groups over them
// (d_kept_group_offsets, capacity groups.groups + 1) and d_counts = {kept sequences, kept
// groups}. The report (report_of) names the first non-finite reward when
// options.nonfinite is error (such groups are dropped either way).
template <class T>
cudaError_t drop_zero_variance_groups(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                      const T* d_rewards, const device_group_layout& groups,
                                      std::uint8_t* d_keep_group, std::int64_t* d_kept_sequences,
                                      std::int64_t* d_kept_group_offsets, std::int64_t* d_counts,
                                      const zero_variance_filter_options& options = {},
                                      cudaStream_t stream = nullptr) {
  using index_iterator = thrust::counting_iterator<std::int64_t>;
  const auto sizes = thrust::make_transform_iterator(
      thrust::counting_iterator<std::size_t>(0), portable::detail::kept_group_size{groups, d_keep_group});
  std::size_t select_sequences_bytes = 0, scan_bytes = 0, select_groups_bytes = 0;
  CASCADE_RL_CUDA_TRY(cub::DeviceSelect::Flagged(nullptr, select_sequences_bytes, index_iterator(0),
                                                 static_cast<std::uint8_t*>(nullptr), d_kept_sequences,
                                                 d_counts, static_cast<std::int64_t>(groups.sequences), stream));
  CASCADE_RL_CUDA_TRY(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, sizes,
                                                    static_cast<std::int64_t*>(nullptr),
                                                    static_cast<std::int64_t>(groups.groups), stream));
  CASCADE_RL_CUDA_TRY(cub::DeviceSelect::Flagged(nullptr, select_groups_bytes,
                                                 static_cast<std::int64_t*>(nullptr), d_keep_group,
                                                 d_kept_group_offsets, d_counts,
                                                 static_cast<std::int64_t>(groups.groups), stream));
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  auto* keep_sequence = carve.take<std::uint8_t>(groups.sequences);
  auto* scanned = carve.take<std::int64_t>(groups.groups);
  void* cub_temp = carve.take<unsigned char>(
      detail::max_of(select_sequences_bytes, detail::max_of(scan_bytes, select_groups_bytes)));
  if (d_temp_storage == nullptr) {
    temp_storage_bytes = carve.bytes();
    return cudaSuccess;
  }
  if (temp_storage_bytes < carve.bytes()) return cudaErrorInvalidValue;
  CASCADE_RL_CUDA_TRY(detail::reset_report(report, stream));
  CASCADE_RL_CUDA_TRY(cudaMemsetAsync(d_counts, 0, 2 * sizeof(std::int64_t), stream));
  CASCADE_RL_CUDA_TRY(cudaMemsetAsync(d_kept_group_offsets, 0, sizeof(std::int64_t), stream));
  if (groups.groups == 0) return cudaSuccess;
  portable::detail::group_filter_functor<T> flag{
      d_rewards, groups, d_keep_group, keep_sequence,
      options.nonfinite == nonfinite_rule::error ? &report->first_nonfinite[0] : nullptr};
  detail::for_each_kernel<<<detail::blocks_for(groups.groups, 256), 256, 0, stream>>>(groups.groups, flag);
  CASCADE_RL_CUDA_TRY(cudaGetLastError());
  CASCADE_RL_CUDA_TRY(cub::DeviceSelect::Flagged(cub_temp, select_sequences_bytes, index_iterator(0),
                                                 keep_sequence, d_kept_sequences, d_counts,
                                                 static_cast<std::int64_t>(groups.sequences), stream));
  CASCADE_RL_CUDA_TRY(cub::DeviceScan::InclusiveSum(cub_temp, scan_bytes, sizes, scanned,
                                                    static_cast<std::int64_t>(groups.groups), stream));
  return cub::DeviceSelect::Flagged(cub_temp, select_groups_bytes, scanned, d_keep_group,
                                    d_kept_group_offsets + 1, d_counts + 1,
                                    static_cast<std::int64_t>(groups.groups), stream);
}

}  // namespace cascade_rl::cuda

namespace cascade_rl {

// The throwing convenience overload: rewards in device memory, the selection on the host
// (as the host core's drop_zero_variance_groups returns it).
template <std::floating_point T>
group_selection drop_zero_variance_groups(exec::cuda_policy policy, std::span<const T> rewards,
                                          const cuda::device_group_layout& groups,
                                          const zero_variance_filter_options& options = {}) {
  if (rewards.size() != groups.sequences)
    detail::fail("rewards", "has " + std::to_string(rewards.size()) + " entries, but the groups hold " +
                                std::to_string(groups.sequences) + " sequences");
  const cudaStream_t stream = policy.stream;
  const std::size_t outputs = groups.groups + groups.sequences + groups.groups + 1 + 2;
  cuda::detail::device_buffer out(outputs * sizeof(std::int64_t), stream);
  auto* kept_sequences = static_cast<std::int64_t*>(out.data());
  auto* kept_offsets = kept_sequences + groups.sequences;
  auto* counts = kept_offsets + groups.groups + 1;
  auto* keep_group = reinterpret_cast<std::uint8_t*>(counts + 2);
  std::size_t bytes = 0;
  cuda::check(cuda::drop_zero_variance_groups(nullptr, bytes, rewards.data(), groups, keep_group,
                                              kept_sequences, kept_offsets, counts, options, stream),
              "size query");
  cuda::detail::device_buffer temp(bytes, stream);
  cuda::check(cuda::drop_zero_variance_groups(temp.data(), bytes, rewards.data(), groups, keep_group,
                                              kept_sequences, kept_offsets, counts, options, stream),
              "stream compaction");
  cuda::detail::throw_if_reported(cuda::detail::copy_to_host(cuda::report_of(temp.data()), stream),
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
