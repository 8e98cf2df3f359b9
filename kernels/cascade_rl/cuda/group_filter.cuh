#pragma once
// Zero-variance group filtering by stream compaction: a kernel flags each group (rewards
// all equal, or a NaN/inf among them) and its sequences, then CUB's DeviceSelect
// compacts the kept sequence indices, and DeviceScan + DeviceSelect the offsets of the
// kept groups. Integer work only: the same result on every run. Also the flags alone
// (zero_variance_groups) and the gather of a per-sequence array by the kept indices
// (gather_sequences).

#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <cuda_runtime.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
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
  if (const detail::call_start start = detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  CASCADE_RL_CUDA_TRY(cudaMemsetAsync(d_counts, 0, 2 * sizeof(std::int64_t), stream));
  CASCADE_RL_CUDA_TRY(cudaMemsetAsync(d_kept_group_offsets, 0, sizeof(std::int64_t), stream));
  if (groups.groups == 0) return cudaSuccess;
  portable::detail::group_filter_functor<T> flag{
      d_rewards, groups, d_keep_group, keep_sequence,
      options.nonfinite == nonfinite_rule::error ? &report->first_nonfinite[0] : nullptr};
  CASCADE_RL_CUDA_TRY(detail::launch(detail::for_each_kernel<decltype(flag)>,
                                     detail::blocks_for(groups.groups, 256), 256, stream, groups.groups, flag));
  CASCADE_RL_CUDA_TRY(cub::DeviceSelect::Flagged(cub_temp, select_sequences_bytes, index_iterator(0),
                                                 keep_sequence, d_kept_sequences, d_counts,
                                                 static_cast<std::int64_t>(groups.sequences), stream));
  CASCADE_RL_CUDA_TRY(cub::DeviceScan::InclusiveSum(cub_temp, scan_bytes, sizes, scanned,
                                                    static_cast<std::int64_t>(groups.groups), stream));
  return cub::DeviceSelect::Flagged(cub_temp, select_groups_bytes, scanned, d_keep_group,
                                    d_kept_group_offsets + 1, d_counts + 1,
                                    static_cast<std::int64_t>(groups.groups), stream);
}

// flags[g] = 1 where group g's rewards are all equal (a group of one included), as
// zero_variance_groups of the host core. The report names the first NaN or infinite reward.
template <class T>
cudaError_t zero_variance_groups(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                 const T* d_rewards, const device_group_layout& groups,
                                 std::uint8_t* d_flags, cudaStream_t stream = nullptr) {
  device_report* report = nullptr;
  if (const detail::call_start start = detail::begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  if (groups.groups == 0) return cudaSuccess;
  const portable::detail::zero_variance_functor<T> flag{d_rewards, groups, d_flags,
                                                        &report->first_nonfinite[0]};
  return detail::launch(detail::for_each_kernel<decltype(flag)>, detail::blocks_for(groups.groups, 256), 256,
                        stream, groups.groups, flag);
}

namespace detail {

template <class I>
__device__ inline bool index_below(I index, std::size_t n) {
  if constexpr (std::is_signed_v<I>)
    if (index < 0) return false;
  return static_cast<std::size_t>(index) < n;
}

template <class V, class I>
__global__ void __launch_bounds__(256)
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

}  // namespace detail

// d_out[k] = d_in[d_kept_sequences[k]] for k in [0, kept): compacts a per-sequence array
// of any trivially copyable type, e.g. with the indices drop_zero_variance_groups wrote.
// report_of(d_temp_storage)->first_refused: the first k whose index is outside
// [0, in_size) (its out[k] is not written).
template <class V, class I>
cudaError_t gather_sequences(void* d_temp_storage, std::size_t& temp_storage_bytes, const V* d_in,
                             std::size_t in_size, const I* d_kept_sequences, std::size_t kept,
                             V* d_out, cudaStream_t stream = nullptr) {
  static_assert(std::is_trivially_copyable_v<V>, "gathered values are copied as bytes");
  device_report* report = nullptr;
  if (const detail::call_start start = detail::begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  if (kept == 0) return cudaSuccess;
  return detail::launch(detail::gather_kernel<V, I>, detail::blocks_for(kept, 256), 256, stream, d_in, in_size,
                        d_kept_sequences, kept, d_out, report);
}

namespace detail {

inline constexpr const char* past_the_end = "is past the end: the selection was made for a longer batch";

}  // namespace detail
}  // namespace cascade_rl::cuda

namespace cascade_rl {

template <std::floating_point T>
void zero_variance_groups(exec::cuda_policy policy, std::span<const T> rewards,
                          const cuda::device_group_layout& groups, std::span<std::uint8_t> flags) {
  if (rewards.size() != groups.sequences)
    detail::fail("rewards", "has " + std::to_string(rewards.size()) + " entries, but the groups hold " +
                                std::to_string(groups.sequences) + " sequences");
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
void gather_sequences(exec::cuda_policy policy, std::span<const V> in, const group_selection& selection,
                      std::span<V> out) {
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
void gather_sequences(exec::cuda_policy policy, std::span<const V> in,
                      std::span<const std::int64_t> kept_sequences, std::span<V> out) {
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
