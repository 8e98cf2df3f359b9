#pragma once
// The kernels of the covariance-selection losses (Clip-Cov, KL-Cov). Each step is a
// functor of detail/covariance_terms.hpp run by detail::for_each_kernel (one thread per
// block of reduce_block_size tokens for the canonical sums, one for their totals, one per
// token for the keys and the marking), the same functors the portable Thrust path runs, so
// the selection is the host's; each loss is detail::token_loss_kernel over its term
// (clip_cov_term, kl_cov_term). The sort between the keys and the marking is CUB's
// (device/covariance_losses.cuh).

#include "cascade_rl/cuda/detail/covariance_terms.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/kernel/token_losses.cuh"

namespace cascade_rl::cuda::detail {

// A selection mask checked against the layout: first_refused receives the first token the
// mask selects but the layout leaves out (the host core refuses such a replayed token; the
// loss would silently drop it).
struct masked_selection_check {
  device_token_layout layout;
  const std::uint8_t* selected;
  device_report* report;
  __device__ void operator()(std::size_t t) const {
    if (selected[t] != 0 && !layout.valid(t)) report_min(&report->first_refused, t);
  }
};

}  // namespace cascade_rl::cuda::detail
