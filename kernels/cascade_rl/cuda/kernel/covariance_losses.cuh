#pragma once
// The kernels of the covariance-selection losses (Clip-Cov, KL-Cov): the canonical block
// sums of A, logp and the valid count a warp per block (covariance_block_sums_kernel, the
// values of the portable path's covariance_block_sums_functor); their totals, each token's
// key and the marking are functors of detail/covariance_terms.hpp run by
// detail::for_each_kernel (one thread for the totals, one per token otherwise), the same
// functors the portable Thrust path runs, so the selection is the host's; each loss is
// detail::token_loss_kernel over its term (clip_cov_term, kl_cov_term). The sort between
// the keys and the marking is CUB's (device/covariance_losses.cuh).

#include "cascade_rl/cuda/detail/covariance_terms.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/kernel/token_losses.cuh"
#include "cascade_rl/cuda/tuning.hpp"

namespace cascade_rl::cuda::detail {

// The selections' block sums (covariance_block_sums_functor's values) a warp per block of
// reduce_block_size tokens: lane j adds the block's tokens j, j + 32, ... in order and the
// butterfly folds the lanes in the canonical tree (core/canonical_sum.hpp), so the sums
// are the host's bits, read coalesced (one thread per block read 4096 strided tokens).
// (T first, the tuning defaulted: the tests launch covariance_block_sums_kernel<double>.)
template <class T, class Tuning = default_tuning>
__global__ void __launch_bounds__(Tuning::warp_item_block_threads)
    covariance_block_sums_kernel(device_token_layout layout, const T* __restrict__ advantages,
                                 const T* __restrict__ log_probs, double* __restrict__ sums,
                                 std::size_t blocks) {
  const std::size_t b = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (b >= blocks) return;  // the whole warp: b is the warp's
  const std::size_t first = b * cascade_rl::detail::reduce_block_size;
  const std::size_t last = min_of(first + cascade_rl::detail::reduce_block_size, layout.tokens);
  double a = 0, l = 0, count = 0;
  for (std::size_t t = first + threadIdx.x % 32; t < last; t += 32) {
    const bool valid = layout.valid(t);
    a += valid ? static_cast<double>(advantages[t]) : 0.0;
    l += valid ? static_cast<double>(log_probs[t]) : 0.0;
    count += valid ? 1.0 : 0.0;
  }
  a = team_reduce<32>(a, add_op{});
  l = team_reduce<32>(l, add_op{});
  count = team_reduce<32>(count, add_op{});  // integers: exact in any order
  if (threadIdx.x % 32 == 0) {
    sums[3 * b] = a;
    sums[3 * b + 1] = l;
    sums[3 * b + 2] = count;
  }
}

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
