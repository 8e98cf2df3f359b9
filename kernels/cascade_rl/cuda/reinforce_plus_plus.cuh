#pragma once
// REINFORCE++ and REINFORCE++-baseline (reinforce_plus_plus.hpp of the host core), and
// their two building blocks:
//   discounted_returns:  one thread per sequence runs the host's backward recurrence
//                        ret_t = r_t + gamma * run, run = mask_t ? ret_t : 0, in the
//                        host's order (the host's bits);
//   masked_whiten:       batch whitening over the valid tokens: count and sum per block
//                        of the canonical sum order, joined in block order into the mean;
//                        squared deviations likewise into the scale; then the elementwise
//                        map. Five launches, the values read three times.
// REINFORCE++-baseline runs the group kernel of group_advantages.cuh (score - group
// mean, RLOO's plan with factor 1) into a per-sequence buffer, broadcasts it onto the
// valid tokens and whitens. No floating-point atomics: the same bits on every run; the
// whitening sums follow the host's canonical order (its bits wherever the inputs are the
// host's).
//
// CUB's shape: size query with d_temp_storage == nullptr, then the run; the temporary
// storage starts with the device_report (report_of): broken offsets, NaN or infinite
// inputs (first_nonfinite[0]), refused groups of one, and first_refused = 1 when the
// batch has a single valid token and the whitening uses the unbiased variance.

#include <cuda_runtime.h>

#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/cuda/broadcast.cuh"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/group_advantages.cuh"
#include "cascade_rl/cuda/policy.hpp"
#include "cascade_rl/cuda/token_losses.cuh"

namespace cascade_rl::cuda {
namespace detail {

// ---- discounted returns -------------------------------------------------------------------

// A thread per sequence runs the host's recurrence in the host's order, each step's
// product rounded alone (terms::discounted_return), so the returns are the host's bits.
// (A warp scan of the affine maps run -> a * run + b is faster on long sequences, but
// composes the products in another order: other bits.)
template <class T>
__global__ void __launch_bounds__(sequence_block_threads)
discounted_returns_kernel(const T* __restrict__ rewards, device_token_layout layout,
                          T* __restrict__ returns, double gamma, device_report* report) {
  const std::size_t s = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= layout.sequences) return;
  std::size_t first = 0, last = 0;
  sequence_range(layout, s, true, report, first, last);
  double run = 0.0;  // the return after t; 0 past a masked token
  for (std::size_t t = last; t-- > first;) {
    const T raw = rewards[t];
    const bool valid = layout.valid(t);
    if (valid && !::cuda::std::isfinite(raw)) report_nonfinite(&report->first_nonfinite[0], t, raw);
    const double ret = terms::discounted_return(static_cast<double>(raw), gamma, run);
    returns[t] = static_cast<T>(ret);
    run = valid ? ret : 0.0;
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
template <class T>
__global__ void __launch_bounds__(token_threads)
whiten_sum_kernel(device_token_layout layout, const T* values, count_sum* __restrict__ partials,
                  unsigned long long* nonfinite_slot) {
  const std::size_t block = static_cast<std::size_t>(blockIdx.x) * token_warps + threadIdx.x / 32;
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
__global__ void __launch_bounds__(32)
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

template <class T>
__global__ void __launch_bounds__(token_threads)
whiten_squares_kernel(device_token_layout layout, const T* values, const whitening_state* state,
                      mean_accumulation accumulation, double* __restrict__ partials) {
  const double mean = state->mean;
  const std::size_t block = static_cast<std::size_t>(blockIdx.x) * token_warps + threadIdx.x / 32;
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
__global__ void __launch_bounds__(32)
whiten_scale_kernel(const double* __restrict__ partials, std::size_t blocks, whitening_options p,
                    whitening_state* state) {
  if (threadIdx.x != 0) return;
  double acc = 0;
  for (std::size_t b = 0; b < blocks; ++b) acc += partials[b];
  if (state->count > 0) state->inv_scale = terms::whitening_inv_scale(acc, state->count, p.estimator, p.epsilon);
}

// values and out may be the same array (each thread reads its token before writing it).
template <class T>
__global__ void __launch_bounds__(256)
whiten_apply_kernel(device_token_layout layout, const T* values, T* out,
                    const whitening_state* state, whitening_options p) {
  const std::size_t t = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= layout.tokens) return;
  out[t] = layout.valid(t) ? terms::whitened(values[t], state->mean, state->inv_scale, p.accumulation,
                                             p.shift_mean)
                           : T(0);
}

// The temporary storage of a whitening, carved after the report.
struct whitening_temp {
  count_sum* sums;
  double* squares;
  whitening_state* state;
};

inline whitening_temp carve_whitening(temp_carver& carve, std::size_t tokens) {
  const std::size_t blocks = (tokens + canonical_block - 1) / canonical_block;
  whitening_temp w;
  w.sums = carve.take<count_sum>(blocks);
  w.squares = carve.take<double>(blocks);
  w.state = carve.take<whitening_state>(1);
  return w;
}

// nonfinite_slot: where to report NaN or infinite values (null: not checked).
template <class T>
cudaError_t launch_whitening(const device_token_layout& layout, const T* values, T* out,
                             const whitening_options& p, const whitening_temp& w,
                             device_report* report, unsigned long long* nonfinite_slot,
                             cudaStream_t stream) {
  const std::size_t blocks = (layout.tokens + canonical_block - 1) / canonical_block;
  const auto tiles = static_cast<unsigned>((blocks + token_warps - 1) / token_warps);
  if (tiles > 0) {
    CASCADE_RL_CUDA_TRY(launch(whiten_sum_kernel<T>, tiles, token_threads, stream, layout, values, w.sums,
                               nonfinite_slot));
  }
  CASCADE_RL_CUDA_TRY(launch(whiten_mean_kernel<>, 1, 32, stream, w.sums, blocks, p, w.state, report));
  if (tiles == 0) return cudaSuccess;
  CASCADE_RL_CUDA_TRY(launch(whiten_squares_kernel<T>, tiles, token_threads, stream, layout, values, w.state,
                             p.accumulation, w.squares));
  CASCADE_RL_CUDA_TRY(launch(whiten_scale_kernel<>, 1, 32, stream, w.squares, blocks, p, w.state));
  return launch(whiten_apply_kernel<T>, blocks_for(layout.tokens, 256), 256, stream, layout, values, out,
                w.state, p);
}

// Options the host core refuses (require_whitening_options): the CUB layer returns
// cudaErrorInvalidValue for them.
inline bool usable_whitening(const whitening_options& o) {
  return o.epsilon >= 0.0 && ::cuda::std::isfinite(o.epsilon) &&
         o.accumulation != mean_accumulation::float32_sequential;
}
inline bool usable_gamma(double gamma) { return gamma >= 0.0 && gamma <= 1.0; }

template <class T>
cudaError_t launch_returns(const T* rewards, const device_token_layout& layout, T* returns,
                           double gamma, device_report* report, cudaStream_t stream) {
  if (layout.sequences == 0) return cudaSuccess;
  return launch(discounted_returns_kernel<T>, blocks_for(layout.sequences, sequence_block_threads),
                sequence_block_threads, stream, rewards, layout, returns, gamma, report);
}

}  // namespace detail

// ---- the CUB-style layer ----------------------------------------------------------------

// Batch whitening of d_values over the valid tokens, 0 on masked tokens; d_whitened may
// be d_values. Reports NaN or infinite valid values in first_nonfinite[0].
template <class T>
cudaError_t masked_whiten(void* d_temp_storage, std::size_t& temp_storage_bytes, const T* d_values,
                          const device_token_layout& layout, T* d_whitened,
                          const whitening_options& options = {}, cudaStream_t stream = nullptr) {
  if (!detail::usable_whitening(options)) return cudaErrorInvalidValue;
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  const detail::whitening_temp w = detail::carve_whitening(carve, layout.tokens);
  if (const detail::call_start start = detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  return detail::launch_whitening(layout, d_values, d_whitened, options, w,
                                  report, &report->first_nonfinite[0], stream);
}

// ret_t = r_t + gamma * run, run = mask_t ? ret_t : 0, backwards within each sequence.
// Reports NaN or infinite rewards on valid tokens in first_nonfinite[0].
template <class T>
cudaError_t discounted_returns(void* d_temp_storage, std::size_t& temp_storage_bytes,
                               const T* d_token_rewards, const device_token_layout& layout,
                               T* d_returns, double gamma = 1.0, cudaStream_t stream = nullptr) {
  if (!detail::usable_gamma(gamma)) return cudaErrorInvalidValue;
  device_report* report = nullptr;
  if (const detail::call_start start = detail::begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  return detail::launch_returns(d_token_rewards, layout, d_returns, gamma, report, stream);
}

// Discounted returns of d_token_rewards written to d_advantages, whitened there.
template <class T>
cudaError_t reinforce_plus_plus_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                           const T* d_token_rewards, const device_token_layout& layout,
                                           T* d_advantages,
                                           const reinforce_plus_plus_options& options = {},
                                           cudaStream_t stream = nullptr) {
  if (!detail::usable_whitening(options.whitening) || !detail::usable_gamma(options.gamma))
    return cudaErrorInvalidValue;
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  const detail::whitening_temp w = detail::carve_whitening(carve, layout.tokens);
  if (const detail::call_start start = detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  CASCADE_RL_CUDA_TRY(detail::launch_returns(d_token_rewards, layout, d_advantages, options.gamma,
                                             report, stream));
  return detail::launch_whitening<T>(layout, d_advantages, d_advantages,
                                     options.whitening, w, report, nullptr, stream);
}

// score_i - mean_g(score) on every valid token of sequence i, whitened over the batch.
// layout.sequences must equal groups.sequences. Reports NaN or infinite scores (under
// nonfinite_rule::error) and refused groups of one.
template <class T>
cudaError_t reinforce_plus_plus_baseline_advantages(
    void* d_temp_storage, std::size_t& temp_storage_bytes, const T* d_scores,
    const device_group_layout& groups, const device_token_layout& layout, T* d_advantages,
    const reinforce_plus_plus_baseline_options& options = {}, cudaStream_t stream = nullptr) {
  if (!detail::usable_whitening(options.whitening) || layout.sequences != groups.sequences)
    return cudaErrorInvalidValue;
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  T* per_sequence = carve.take<T>(groups.sequences);
  const detail::whitening_temp w = detail::carve_whitening(carve, layout.tokens);
  if (const detail::call_start start = detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  CASCADE_RL_CUDA_TRY(detail::launch_groups<T>(d_scores, groups, per_sequence, nullptr, nullptr,
                                               detail::group_params_of(options), report, stream));
  if (layout.sequences > 0) {
    CASCADE_RL_CUDA_TRY(detail::launch(detail::broadcast_kernel<T>,
                                       detail::blocks_for(layout.sequences * 32, detail::sequence_block_threads),
                                       detail::sequence_block_threads, stream, per_sequence, layout,
                                       d_advantages, report));
  }
  return detail::launch_whitening<T>(layout, d_advantages, d_advantages,
                                     options.whitening, w, report, nullptr, stream);
}

namespace detail {

// After throw_if_reported: the whitening's own refusal, in the host core's words.
inline void throw_if_whitening_refused(const device_report& r) {
  if (r.first_refused != device_report::none)
    cascade_rl::detail::fail("tokens",
                             "has 1 valid token, but whitening with the unbiased variance needs at least 2");
}

inline void require_gamma(double gamma) {
  if (!usable_gamma(gamma))
    cascade_rl::detail::fail("gamma", "must lie in [0, 1], got " + std::to_string(gamma));
}

}  // namespace detail
}  // namespace cascade_rl::cuda

// ---- the throwing convenience layer -----------------------------------------------------
// Spans point to device memory; each call waits for its stream.

namespace cascade_rl {

// Batch whitening of per-token values over the valid tokens; 0 on masked tokens.
// `whitened` may be the same span as `values`.
template <std::floating_point T>
void masked_whiten(exec::cuda_policy policy, std::span<const T> values,
                   const cuda::device_token_layout& tokens, std::span<T> whitened,
                   const whitening_options& options = {}) {
  detail::require_whitening_options(options);
  detail::require_size(values.size(), tokens.tokens, "values", "one per token");
  detail::require_size(whitened.size(), tokens.tokens, "whitened", "one per token");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::masked_whiten(temp, bytes, values.data(), tokens, whitened.data(), options,
                                   policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"values"});
  cuda::detail::throw_if_whitening_refused(report);
}

template <std::floating_point T>
void discounted_returns(exec::cuda_policy policy, std::span<const T> token_rewards,
                        const cuda::device_token_layout& tokens, std::span<T> returns,
                        double gamma = 1.0) {
  cuda::detail::require_gamma(gamma);
  detail::require_size(token_rewards.size(), tokens.tokens, "token_rewards", "one per token");
  detail::require_size(returns.size(), tokens.tokens, "returns", "one per token");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::discounted_returns(temp, bytes, token_rewards.data(), tokens, returns.data(),
                                        gamma, policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"token_rewards"});
}

template <std::floating_point T>
void reinforce_plus_plus_advantages(exec::cuda_policy policy, std::span<const T> token_rewards,
                                    const cuda::device_token_layout& tokens, std::span<T> advantages,
                                    const reinforce_plus_plus_options& options = {}) {
  detail::require_whitening_options(options.whitening);
  detail::require_size(advantages.size(), tokens.tokens, "advantages", "one per token");
  cuda::detail::require_gamma(options.gamma);
  detail::require_size(token_rewards.size(), tokens.tokens, "token_rewards", "one per token");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::reinforce_plus_plus_advantages(temp, bytes, token_rewards.data(), tokens,
                                                    advantages.data(), options, policy.stream);
      });
  cuda::detail::throw_if_reported(report, {"token_rewards"});
  cuda::detail::throw_if_whitening_refused(report);
}

template <std::floating_point T>
void reinforce_plus_plus_baseline_advantages(exec::cuda_policy policy, std::span<const T> scores,
                                             const cuda::device_group_layout& groups,
                                             const cuda::device_token_layout& tokens,
                                             std::span<T> advantages,
                                             const reinforce_plus_plus_baseline_options& options = {}) {
  detail::require_whitening_options(options.whitening);
  detail::require_size(tokens.sequences, scores.size(), "tokens", "one sequence per score");
  detail::require_size(advantages.size(), tokens.tokens, "advantages", "one per token");
  if (scores.size() != groups.sequences)
    detail::fail("scores", "has " + std::to_string(scores.size()) + " entries, but the groups hold " +
                               std::to_string(groups.sequences) + " sequences");
  const cuda::device_report report =
      cuda::detail::run_and_report(policy.stream, [&](void* temp, std::size_t& bytes) {
        return cuda::reinforce_plus_plus_baseline_advantages(temp, bytes, scores.data(), groups,
                                                             tokens, advantages.data(), options,
                                                             policy.stream);
      });
  cuda::detail::throw_if_reported(
      report, {"scores"},
      "is a group of one sequence, but REINFORCE++-baseline needs at least 2 (set "
      "options.singleton to accept it)");
  cuda::detail::throw_if_whitening_refused(report);
}

}  // namespace cascade_rl
