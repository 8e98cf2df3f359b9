#pragma once
// The kernels of REINFORCE++'s building blocks (device/reinforce_plus_plus.cuh launches
// them): the discounted returns, a thread per sequence in the host's order, and the
// batch whitening's sums in the canonical order, its scale and its elementwise map.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/kernel/broadcast.cuh"
#include "cascade_rl/cuda/kernel/token_losses.cuh"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/options/group_estimators.hpp"

namespace cascade_rl::cuda::detail {

// ---- discounted returns -------------------------------------------------------------------

// A thread per sequence runs the host's recurrence in the host's order, each step's
// product rounded alone (terms::discounted_return), so the returns are the host's bits.
// (A warp scan of the affine maps run -> a * run + b is faster on long sequences, but
// composes the products in another order: other bits.)
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
    discounted_returns_kernel(const T* __restrict__ rewards, device_token_layout layout,
                              T* __restrict__ returns, double gamma, masked_token_return masked,
                              device_report* report) {
  const std::size_t s = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= layout.sequences) return;
  std::size_t first = 0, last = 0;
  sequence_range(layout, s, true, report, first, last);
  double run = 0.0;  // the return after t
  for (std::size_t t = last; t-- > first;) {
    const T raw = rewards[t];
    const bool valid = layout.valid(t);
    if (valid && !::cuda::std::isfinite(raw)) report_nonfinite(&report->first_nonfinite[0], t, raw);
    const terms::return_step step =
        terms::discounted_return_step(static_cast<double>(raw), valid, gamma, run, masked);
    returns[t] = static_cast<T>(step.value);
    run = step.run;
  }
}

// ---- whitening ------------------------------------------------------------------------------

struct count_sum {
  unsigned long long count = 0;
  double sum = 0;
};
struct add_count_sum {
  __device__ count_sum operator()(const count_sum& a, const count_sum& b) const {
    return {a.count + b.count, a.sum + b.sum};
  }
};

struct whitening_state {
  unsigned long long count;
  double mean;
  double inv_scale;
};

// The whitening's two sums in the canonical order (core/canonical_sum.hpp), as the host's
// blocked_sum: a warp per block of 4096 tokens, lane j adding tokens j, j + 32, ... in
// order, the butterfly folding the lanes in the canonical tree; then the block sums
// added in block order on one thread. Counts are exact in any order.

// Per block: the valid count and the sum of the valid values.
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::warp_item_block_threads)
whiten_sum_kernel(device_token_layout layout, const T* values, count_sum* __restrict__ partials,
                  unsigned long long* nonfinite_slot) {
  const std::size_t block = static_cast<std::size_t>(blockIdx.x) * token_warps<Tuning> + threadIdx.x / 32;
  const std::size_t first = block * canonical_block;
  const std::size_t last = first + canonical_block < layout.tokens ? first + canonical_block : layout.tokens;
  count_sum acc;
  for (std::size_t t = first + threadIdx.x % 32; t < last; t += 32) {
    if (!layout.valid(t)) continue;
    const T v = values[t];
    if (nonfinite_slot != nullptr && !::cuda::std::isfinite(v)) report_nonfinite(nonfinite_slot, t, v);
    ++acc.count;
    acc.sum += static_cast<double>(v);
  }
  acc = team_reduce<32>(acc, add_count_sum{});
  if (threadIdx.x % 32 == 0 && first < layout.tokens) partials[block] = acc;
}

template <int = 0>
__global__ void __launch_bounds__(combine_block_threads)
whiten_mean_kernel(const count_sum* __restrict__ partials, std::size_t blocks, whitening_options p,
                   whitening_state* state, device_report* report) {
  if (threadIdx.x != 0) return;
  count_sum acc;
  for (std::size_t b = 0; b < blocks; ++b) acc = add_count_sum{}(acc, partials[b]);
  state->count = acc.count;
  state->mean = acc.count > 0 ? terms::whitening_mean(acc.sum, acc.count, p.accumulation) : 0.0;
  state->inv_scale = 0.0;
  if (p.estimator == std_estimator::unbiased && acc.count == 1) report->first_refused = 1;
}

template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::warp_item_block_threads)
whiten_squares_kernel(device_token_layout layout, const T* values, const whitening_state* state,
                      mean_accumulation accumulation, double* __restrict__ partials) {
  const double mean = state->mean;
  const std::size_t block = static_cast<std::size_t>(blockIdx.x) * token_warps<Tuning> + threadIdx.x / 32;
  const std::size_t first = block * canonical_block;
  const std::size_t last = first + canonical_block < layout.tokens ? first + canonical_block : layout.tokens;
  double acc = 0;
  for (std::size_t t = first + threadIdx.x % 32; t < last; t += 32) {
    if (!layout.valid(t)) continue;
    const double d = terms::deviation(values[t], mean, accumulation);
    acc += math::product_rn(d, d);
  }
  acc = team_reduce<32>(acc, add_op{});
  if (threadIdx.x % 32 == 0 && first < layout.tokens) partials[block] = acc;
}

template <int = 0>
__global__ void __launch_bounds__(combine_block_threads)
whiten_scale_kernel(const double* __restrict__ partials, std::size_t blocks, whitening_options p,
                    whitening_state* state) {
  if (threadIdx.x != 0) return;
  double acc = 0;
  for (std::size_t b = 0; b < blocks; ++b) acc += partials[b];
  if (state->count > 0) state->inv_scale = terms::whitening_inv_scale(acc, state->count, p.estimator, p.epsilon);
}

// values and out may be the same array (each thread reads its token before writing it).
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::thread_item_block_threads)
whiten_apply_kernel(device_token_layout layout, const T* values, T* out,
                    const whitening_state* state, whitening_options p) {
  const std::size_t t = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= layout.tokens) return;
  out[t] = layout.valid(t) ? terms::whitened(values[t], state->mean, state->inv_scale, p.accumulation,
                                             p.shift_mean)
                           : T(0);
}

}  // namespace cascade_rl::cuda::detail
