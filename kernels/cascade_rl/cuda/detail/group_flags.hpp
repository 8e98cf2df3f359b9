#pragma once
// The per-group flags of the zero-variance filter as functors over a group index, for
// the CUDA kernels (kernel/group_filter.cuh runs them one thread per group) and the
// portable Thrust path alike.

#include <cuda/std/cmath>

#include <cstddef>
#include <cstdint>

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/cuda/device_layout.hpp"

namespace cascade_rl::cuda::detail {

template <class T>
struct group_filter_functor {
  const T* rewards;
  device_group_layout groups;
  std::uint8_t* keep_group;
  std::uint8_t* keep_sequence;
  unsigned long long* first_nonfinite = nullptr;  // CUDA path: reports the first NaN/inf
  CASCADE_RL_HD void operator()(std::size_t g) const {
    const std::size_t first = groups.begin(g);
    const std::size_t last = groups.end(g);
    bool nonfinite = false, varies = false;
    for (std::size_t i = first; i < last; ++i) {
      const bool bad = !::cuda::std::isfinite(rewards[i]);
#if defined(CASCADE_RL_DEVICE_REPORTS)
      if (bad && !nonfinite && first_nonfinite != nullptr)
        atomicMin(first_nonfinite, device_report::nonfinite_entry(i, ::cuda::std::isinf(rewards[i])));
#endif
      nonfinite = nonfinite || bad;
      varies = varies || rewards[i] != rewards[first];
    }
    const std::uint8_t keep = !nonfinite && varies ? 1 : 0;
    keep_group[g] = keep;
    for (std::size_t i = first; i < last; ++i) keep_sequence[i] = keep;
  }
};

// zero_variance_groups of the host core: flags[g] = 1 where the group's rewards are all
// equal (a group of one included).
template <class T>
struct zero_variance_functor {
  const T* rewards;
  device_group_layout groups;
  std::uint8_t* flags;
  unsigned long long* first_nonfinite = nullptr;  // CUDA path: reports the first NaN/inf
  CASCADE_RL_HD void operator()(std::size_t g) const {
    const std::size_t first = groups.begin(g);
    const std::size_t last = groups.end(g);
    std::uint8_t constant = 1;
    for (std::size_t i = first; i < last; ++i) {
#if defined(CASCADE_RL_DEVICE_REPORTS)
      if (first_nonfinite != nullptr && !::cuda::std::isfinite(rewards[i]))
        atomicMin(first_nonfinite, device_report::nonfinite_entry(i, ::cuda::std::isinf(rewards[i])));
#endif
      if (rewards[i] != rewards[first]) constant = 0;
    }
    flags[g] = constant;
  }
};

struct kept_group_size {
  device_group_layout groups;
  const std::uint8_t* keep_group;
  CASCADE_RL_HD std::int64_t operator()(std::size_t g) const {
    return keep_group[g] != 0 ? static_cast<std::int64_t>(groups.end(g) - groups.begin(g)) : 0;
  }
};

}  // namespace cascade_rl::cuda::detail
