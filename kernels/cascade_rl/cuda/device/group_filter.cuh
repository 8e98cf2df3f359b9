#pragma once
// The CUB-shaped layer of the zero-variance group filter: a kernel flags each group
// (rewards all equal, or a NaN/inf among them) and its sequences, then CUB's
// DeviceSelect compacts the kept sequence indices, and DeviceScan + DeviceSelect the
// offsets of the kept groups; also the flags alone (zero_variance_groups) and the gather
// of a per-sequence array by the kept indices (gather_sequences). Size query with
// d_temp_storage == nullptr, then the run; the temporary storage starts with the
// device_report (report_of).

#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <cuda_runtime.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/group_filter.cuh"
#include "cascade_rl/options/group_estimators.hpp"

namespace cascade_rl::cuda {

// Writes d_keep_group[groups.groups], the input indices of the kept sequences
// (d_kept_sequences, capacity groups.sequences), the offsets of the kept groups over them
// (d_kept_group_offsets, capacity groups.groups + 1) and d_counts = {kept sequences, kept
// groups}. The report (report_of) names the first non-finite reward when
// options.nonfinite is error (such groups are dropped either way).
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t drop_zero_variance_groups(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                      const T* d_rewards, const device_group_layout& groups,
                                      std::uint8_t* d_keep_group, std::int64_t* d_kept_sequences,
                                      std::int64_t* d_kept_group_offsets, std::int64_t* d_counts,
                                      const zero_variance_filter_options& options = {},
                                      cudaStream_t stream = nullptr) {
  using index_iterator = thrust::counting_iterator<std::int64_t>;
  const auto sizes = thrust::make_transform_iterator(
      thrust::counting_iterator<std::size_t>(0), detail::kept_group_size{groups, d_keep_group});
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
  detail::group_filter_functor<T> flag{
      d_rewards, groups, d_keep_group, keep_sequence,
      options.nonfinite == nonfinite_rule::error ? &report->first_nonfinite[0] : nullptr};
  CASCADE_RL_CUDA_TRY(detail::launch(detail::for_each_kernel<decltype(flag)>,
                                     detail::blocks_for(groups.groups, Tuning::thread_item_block_threads),
                                     Tuning::thread_item_block_threads, stream, groups.groups, flag));
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
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t zero_variance_groups(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                 const T* d_rewards, const device_group_layout& groups,
                                 std::uint8_t* d_flags, cudaStream_t stream = nullptr) {
  device_report* report = nullptr;
  if (const detail::call_start start = detail::begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  if (groups.groups == 0) return cudaSuccess;
  const detail::zero_variance_functor<T> flag{d_rewards, groups, d_flags,
                                                        &report->first_nonfinite[0]};
  return detail::launch(detail::for_each_kernel<decltype(flag)>,
                        detail::blocks_for(groups.groups, Tuning::thread_item_block_threads),
                        Tuning::thread_item_block_threads, stream, groups.groups, flag);
}

// d_out[k] = d_in[d_kept_sequences[k]] for k in [0, kept): compacts a per-sequence array
// of any trivially copyable type, e.g. with the indices drop_zero_variance_groups wrote.
// report_of(d_temp_storage)->first_refused: the first k whose index is outside
// [0, in_size) (its out[k] is not written).
template <tuning_policy Tuning = default_tuning, class V, class I>
cudaError_t gather_sequences(void* d_temp_storage, std::size_t& temp_storage_bytes, const V* d_in,
                             std::size_t in_size, const I* d_kept_sequences, std::size_t kept,
                             V* d_out, cudaStream_t stream = nullptr) {
  static_assert(std::is_trivially_copyable_v<V>, "gathered values are copied as bytes");
  return detail::report_call_per_item<Tuning>(d_temp_storage, temp_storage_bytes, stream, kept,
                                              detail::gather_kernel<Tuning, V, I>, d_in, in_size,
                                              d_kept_sequences, kept, d_out);
}

}  // namespace cascade_rl::cuda
