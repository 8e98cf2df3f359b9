#pragma once
// The log-probs kernel (device/log_probs.cuh launches it): 16 threads per row (half a
// warp), thread l being lane l of terms/log_sum_exp.hpp's order. Per chunk of 1024
// logits each thread loads its 64 values into registers (a half-warp reads 16
// consecutive logits at a time, coalesced), takes their maximum, joins the 16 lane
// maxima by shuffles lane 0 first, then sums its exp terms, and the 16 lane sums join
// the state again by shuffles in lane order. Every thread of the row keeps the same
// state. Rows go on grid dimension x only (y and z are capped at 65,535), 16 per block
// by default (rows_per_block<Tuning>).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/terms/log_softmax_gradient.hpp"
#include "cascade_rl/terms/log_sum_exp.hpp"

namespace cascade_rl::cuda::detail {

// row_threads is fixed: thread l of a row is lane l of terms/log_sum_exp.hpp's order (the
// lanes' maxima and sums join in lane order), so another count would give other bits. The
// block (Tuning::logits_block_threads, whole warps) only sets how many rows it holds.
inline constexpr unsigned row_threads = static_cast<unsigned>(terms::lse_lanes);
template <class Tuning>
inline constexpr unsigned rows_per_block = Tuning::logits_block_threads / row_threads;
inline constexpr unsigned values_per_lane = static_cast<unsigned>(terms::lse_chunk / terms::lse_lanes);

// The state of the row's chunks, the same in each of the row's 16 threads.
template <class T>
__device__ terms::lse_state row_lse(const T* __restrict__ x, std::size_t vocab, float inverse_temperature) {
  constexpr unsigned whole_warp = 0xffffffffu;
  const unsigned lane = threadIdx.x % row_threads;
  const unsigned half = threadIdx.x & 16u;  // the first bit of this row's lanes in the warp
  terms::lse_state st;
  for (std::size_t c = 0; c < vocab; c += terms::lse_chunk) {
    const std::size_t n = min_of(terms::lse_chunk, vocab - c);
    const std::size_t per_lane = terms::lse_padded(n) / terms::lse_lanes;
    float v[values_per_lane];
    float lane_max = terms::minus_infinity_f;
    bool has_nan = false;
#pragma unroll
    for (unsigned k = 0; k < values_per_lane; ++k)
      if (k < per_lane) {
        v[k] = terms::lse_value(x + c, lane + k * row_threads, n, inverse_temperature);
        lane_max = terms::lse_max(lane_max, v[k]);
        has_nan = has_nan || v[k] != v[k];
      }
    terms::lse_raise_max(st, terms::max_of_lanes([&](unsigned l) {
                           return __shfl_sync(whole_warp, lane_max, static_cast<int>(l), row_threads);
                         }));
    const bool chunk_has_nan = ((__ballot_sync(whole_warp, has_nan) >> half) & 0xffffu) != 0;
    float lane_s = 0, lane_w = 0;
#pragma unroll
    for (unsigned k = 0; k < values_per_lane; ++k)
      if (k < per_lane) {
        float e, ed;
        terms::lse_terms(v[k] - st.m, e, ed);
        lane_s += e;
        lane_w += ed;
      }
    // The shuffles run in every row, whether its sums count or not.
    const double s = terms::sum_of_lanes([&](unsigned l) {
      return __shfl_sync(whole_warp, lane_s, static_cast<int>(l), row_threads);
    });
    const double w = terms::sum_of_lanes([&](unsigned l) {
      return __shfl_sync(whole_warp, lane_w, static_cast<int>(l), row_threads);
    });
    if (!terms::lse_skips_chunk(st, chunk_has_nan)) {
      st.s += s;
      st.w += w;
    }
  }
  return st;
}

template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::logits_block_threads)
log_probs_kernel(const T* __restrict__ logits, std::size_t rows, std::size_t vocab,
                 std::size_t row_stride, const std::int64_t* __restrict__ labels,
                 float inverse_temperature, float* __restrict__ log_probs,
                 float* __restrict__ entropy, device_report* report) {
  const std::size_t row =
      static_cast<std::size_t>(blockIdx.x) * rows_per_block<Tuning> + threadIdx.x / row_threads;
  // Rows past the end fold the last row again and write nothing: every shuffle has the
  // whole warp.
  const T* x = logits + min_of(row, rows - 1) * row_stride;
  const terms::lse_state st = row_lse(x, vocab, inverse_temperature);
  if (row >= rows || threadIdx.x % row_threads != 0) return;
  const std::int64_t label = labels[row];
  float label_logit = math::detail::quiet_nan_f;
  if (label >= 0 && static_cast<std::size_t>(label) < vocab)
    label_logit = static_cast<float>(x[label]) * inverse_temperature;
  else
    report_min(&report->first_bad_label, row);
  log_probs[row] = terms::log_prob_of(st, label_logit);
  if (entropy != nullptr) entropy[row] = terms::entropy_of(st);
}

// The backward pass: the row's 16 threads recompute its state as the forward does, then
// thread l writes the gradient of logits l, l + 16, ... (terms/log_softmax_gradient.hpp).
// Lane 0 reports a non-finite seed (first_nonfinite[0]: dL/dlogp, [1]: dL/dH) and a
// label outside [0, vocab).
template <class Tuning, class T>
__global__ void __launch_bounds__(Tuning::logits_block_threads)
    log_probs_backward_kernel(const T* __restrict__ logits, std::size_t rows, std::size_t vocab,
                              std::size_t row_stride, const std::int64_t* __restrict__ labels,
                              const float* __restrict__ log_prob_seeds,
                              const float* __restrict__ entropy_seeds, float inverse_temperature,
                              float* __restrict__ grad_logits, device_report* report) {
  const std::size_t row =
      static_cast<std::size_t>(blockIdx.x) * rows_per_block<Tuning> + threadIdx.x / row_threads;
  const T* x = logits + min_of(row, rows - 1) * row_stride;
  const terms::softmax_row softmax = terms::softmax_row_of(row_lse(x, vocab, inverse_temperature));
  if (row >= rows) return;
  const unsigned lane = threadIdx.x % row_threads;
  const float g = log_prob_seeds[row];
  const float h = entropy_seeds == nullptr ? 0.0f : entropy_seeds[row];
  const std::int64_t label = labels[row];
  if (lane == 0) {
    if (!::cuda::std::isfinite(g)) report_nonfinite(&report->first_nonfinite[0], row, g);
    if (!::cuda::std::isfinite(h)) report_nonfinite(&report->first_nonfinite[1], row, h);
    if (label < 0 || static_cast<std::size_t>(label) >= vocab)
      report_min(&report->first_bad_label, row);
  }
  float* out = grad_logits + row * row_stride;
  for (std::size_t v = lane; v < vocab; v += row_threads)
    out[v] =
        terms::logit_gradient(static_cast<float>(x[v]) * inverse_temperature,
                              label >= 0 && static_cast<std::size_t>(label) == v, softmax,
                              static_cast<double>(g), static_cast<double>(h), inverse_temperature);
}

}  // namespace cascade_rl::cuda::detail
