#pragma once
// The kernels of the token losses (device/token_losses.cuh launches them). Each warp
// takes a block of 4096 tokens, writes dL/dlogp, and sums its loss and metrics in the
// canonical order of core/canonical_sum.hpp (32 interleaved lanes, then the butterfly,
// which is the canonical tree) into one partial; a second kernel adds the partials in
// block order on one thread. seq-mean-token-mean first counts each sequence's valid
// tokens (one warp per sequence), and a token finds its sequence by binary search over
// the offsets. local_loss_counts counts valid tokens and non-empty sequences (a warp per
// sequence, integer sums).

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/core/canonical_sum.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/token_terms.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/options/loss_normalizer.hpp"

namespace cascade_rl::cuda::detail {

// Token sums: a warp per block of the canonical sum order, token_warps<Tuning> per CUDA
// block (8 by default). The canonical block (4096 tokens, the host's blocked sum) is fixed:
// it sets the order of the sum, so another size would give other bits.
template <class Tuning>
inline constexpr unsigned token_warps = Tuning::warp_item_block_threads / 32;
inline constexpr std::size_t canonical_block = cascade_rl::detail::reduce_block_size;

// valid[s] = valid tokens of sequence s; one warp per sequence. Reports broken offsets.
template <class Tuning>
__global__ void __launch_bounds__(Tuning::warp_item_block_threads)
sequence_valid_kernel(device_token_layout layout, unsigned long long* valid, device_report* report) {
  const std::size_t s = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  std::size_t first = 0, last = 0;
  if (s < layout.sequences) {
    first = layout.begin(s);
    last = layout.end(s);
    const bool broken = last < first || last > layout.tokens || (s == 0 && first != 0) ||
                        (s + 1 == layout.sequences && last != layout.tokens);
    if (broken) {
      if (lane == 0) report_min(&report->first_bad_offset, s == 0 && first != 0 ? 0 : s + 1);
      first = last = 0;
    }
  }
  unsigned long long n = 0;
  for (std::size_t t = first + lane; t < last; t += 32) n += layout.valid(t);
  n = team_reduce<32>(n, add_op{});
  if (s < layout.sequences && lane == 0) valid[s] = n;
}

// The sequence holding token t: the last s with offsets[s] <= t (and t < offsets[s + 1]).
__device__ inline std::size_t sequence_of(const device_token_layout& layout, std::size_t t) {
  std::size_t lo = 0, hi = layout.sequences;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (static_cast<std::size_t>(layout.offsets[mid]) <= t) lo = mid; else hi = mid;
  }
  return lo;
}

// A warp per block of the canonical order (core/canonical_sum.hpp): lane j adds the loss
// of tokens j, j + 32, ... of its block in order, the warp butterfly folds the lanes in
// the canonical tree (xor 16, 8, 4, 2, 1 leaves lane j + w's sum added to lane j's), and
// lane 0 writes the block's tally. Integer counts are exact in any order.
template <class Tuning, class T, class Term>
__global__ void __launch_bounds__(Tuning::warp_item_block_threads)
token_loss_kernel(device_token_layout layout, Term term, T* __restrict__ grad_out, loss_aggregation mode,
                  loss_normalizer normalizer, const unsigned long long* __restrict__ sequence_valid,
                  loss_tally* __restrict__ partials, device_report* report) {
  const double constant_weight = aggregation_weight<T>(mode, normalizer, 0);
  const std::size_t block = static_cast<std::size_t>(blockIdx.x) * token_warps<Tuning> + threadIdx.x / 32;
  const std::size_t first = block * canonical_block;
  const std::size_t last = first + canonical_block < layout.tokens ? first + canonical_block : layout.tokens;
  loss_tally acc;
  for (std::size_t t = first + threadIdx.x % 32; t < last; t += 32) {
    if (!layout.valid(t)) {
      grad_out[t] = T(0);
      term.on_masked(t);
      continue;
    }
    const nonfinite_hit bad = term.first_nonfinite(t);
    if (bad.argument >= 0)
      report_min(&report->first_nonfinite[bad.argument], device_report::nonfinite_entry(t, bad.infinite));
    const double c = sequence_valid == nullptr
                         ? constant_weight
                         : aggregation_weight<T>(mode, normalizer,
                                                 sequence_valid[sequence_of(layout, t)]);
    ++acc.metrics.valid_tokens;
    const terms::token_loss l = term(t, acc);
    acc.loss += math::product_rn(c, l.value);  // rounded alone, as on the host
    grad_out[t] = static_cast<T>(c * l.grad);
  }
  acc = team_reduce<32>(acc, add_tallies{});
  if (threadIdx.x % 32 == 0 && first < layout.tokens) partials[block] = acc;
}

// The block tallies added in block order (the canonical order's last step), on one thread.
template <int = 0>
__global__ void __launch_bounds__(combine_block_threads)
combine_tallies_kernel(const loss_tally* __restrict__ partials, std::size_t count, loss_tally* result) {
  if (threadIdx.x != 0) return;
  loss_tally acc;
  for (std::size_t b = 0; b < count; ++b) acc = add_tallies{}(acc, partials[b]);
  *result = acc;
}

// Per CUDA block of token_warps<Tuning> sequences (a warp each): their valid tokens and
// non-empty sequences (integers, exact in any order: the block's reduction may have any
// number of warps up to 32, the partials block_reduce keeps).
template <class Tuning>
__global__ void __launch_bounds__(Tuning::warp_item_block_threads)
loss_counts_kernel(device_token_layout layout, valid_counts* __restrict__ partials, device_report* report) {
  __shared__ __align__(16) unsigned char shared[32 * block_reduce_bytes];
  const std::size_t s = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  std::size_t first = 0, last = 0;
  if (s < layout.sequences) sequence_range(layout, s, lane == 0, report, first, last);
  unsigned long long n = 0;
  for (std::size_t t = first + lane; t < last; t += 32) n += layout.valid(t);
  n = team_reduce<32>(n, add_op{});
  valid_counts c = lane == 0 && s < layout.sequences ? counts_of_sequence(n) : valid_counts{};
  c = block_reduce(c, add_valid_counts{}, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = c;
}

template <class Tuning>
__global__ void __launch_bounds__(Tuning::warp_item_block_threads)
combine_counts_kernel(const valid_counts* __restrict__ partials, std::size_t count, loss_counts* result) {
  __shared__ __align__(16) unsigned char shared[32 * block_reduce_bytes];
  valid_counts acc;
  for (std::size_t b = threadIdx.x; b < count; b += blockDim.x) acc = add_valid_counts{}(acc, partials[b]);
  acc = block_reduce(acc, add_valid_counts{}, shared);
  if (threadIdx.x == 0) {
    result->tokens = static_cast<std::size_t>(acc.tokens);
    result->sequences = static_cast<std::size_t>(acc.sequences);
  }
}

}  // namespace cascade_rl::cuda::detail
