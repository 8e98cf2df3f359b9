#pragma once
// Zero-variance group filtering on the portable path: the groups' flags, their kept
// indices by stream compaction, and the gather of kept sequences.

#include "cascade_rl/cuda/detail/group_flags.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/cuda/portable/group_advantages.hpp"

namespace cascade_rl::cuda::portable::detail {

struct is_set {
  CASCADE_RL_HD bool operator()(std::uint8_t flag) const { return flag != 0; }
};

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

struct filter_counts {
  std::size_t kept_sequences = 0;
  std::size_t kept_groups = 0;
};

// Drops the groups whose rewards are all equal or hold a NaN or infinite value. Writes
// keep_group[g] (groups), the input indices of the kept sequences (up to
// groups.sequences) and the offsets of the kept groups over them (up to groups.groups + 1
// entries); scratch holds groups.groups values.
template <class ExecPolicy, class T>
filter_counts drop_zero_variance_groups(ExecPolicy&& exec, const T* rewards,
                                        const device_group_layout& groups,
                                        std::uint8_t* keep_group, std::uint8_t* keep_sequence,
                                        std::int64_t* kept_sequences,
                                        std::int64_t* kept_group_offsets, std::int64_t* scratch) {
  detail::for_each_index(exec, groups.groups,
                         detail::group_filter_functor<T>{rewards, groups, keep_group, keep_sequence});
  const thrust::counting_iterator<std::int64_t> index(0);
  filter_counts counts;
  counts.kept_sequences = static_cast<std::size_t>(
      thrust::copy_if(exec, index, index + static_cast<std::int64_t>(groups.sequences),
                      keep_sequence, kept_sequences, detail::is_set{}) -
      kept_sequences);
  thrust::fill_n(exec, kept_group_offsets, 1, std::int64_t{0});
  if (groups.groups == 0) return counts;
  const auto sizes = thrust::make_transform_iterator(
      thrust::counting_iterator<std::size_t>(0), detail::kept_group_size{groups, keep_group});
  thrust::inclusive_scan(exec, sizes, sizes + groups.groups, scratch);
  counts.kept_groups = static_cast<std::size_t>(
      thrust::copy_if(exec, scratch, scratch + groups.groups, keep_group, kept_group_offsets + 1,
                      detail::is_set{}) -
      (kept_group_offsets + 1));
  return counts;
}

// flags[g] = 1 where group g's rewards are all equal (a group of one included).
template <class ExecPolicy, class T>
void zero_variance_groups(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                          std::uint8_t* flags) {
  detail::for_each_index(exec, groups.groups, detail::zero_variance_functor<T>{rewards, groups, flags});
}

// out[k] = in[kept_sequences[k]] for k in [0, kept): compacts a per-sequence array (of any
// trivially copyable type) with the indices of a selection.
template <class ExecPolicy, class V, class I>
void gather_sequences(ExecPolicy&& exec, const V* in, const I* kept_sequences, std::size_t kept, V* out) {
  if (kept == 0) return;
  thrust::gather(exec, kept_sequences, kept_sequences + kept, in, out);
}

}  // namespace cascade_rl::cuda::portable
