#pragma once
// Log-probabilities of the sampled tokens and the entropy of each row's softmax, from
// logits [rows, vocab] in one pass with an online log-sum-exp (detail/math.hpp): every
// logit is read once, with 16-byte loads; fp32 and bf16 logits, vocab up to and beyond
// 256k. Rows go on grid dimension x only (y and z are capped at 65,535).
//
// vocab up to 4096: one warp per row (8 rows per block); larger: a block of 256 threads
// per row. Each thread folds its values in a fixed order and the team joins its threads'
// states in a fixed order, so the result is the same bits on every run.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/group_advantages.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl::cuda {
namespace detail {

inline constexpr unsigned logits_block_threads = 256;
inline constexpr std::size_t warp_row_vocab = 4096;

template <class T>
struct logit_vector {
  static constexpr int width = 16 / sizeof(T);
  __device__ static void load(const T* p, float inverse_temperature, float (&out)[width]) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    T v[width];
    memcpy(static_cast<void*>(v), &raw, sizeof(raw));  // T may be a class (bf16): bytes as they are
#pragma unroll
    for (int k = 0; k < width; ++k) out[k] = static_cast<float>(v[k]) * inverse_temperature;
  }
};

// THREADS threads per row: 32 (a warp) or logits_block_threads (the block).
template <class T, int THREADS>
__global__ void __launch_bounds__(logits_block_threads)
log_probs_kernel(const T* __restrict__ logits, std::size_t rows, std::size_t vocab,
                 std::size_t row_stride, const std::int64_t* __restrict__ labels,
                 float inverse_temperature, float* __restrict__ log_probs,
                 float* __restrict__ entropy, device_report* report) {
  __shared__ __align__(16) unsigned char shared[32 * block_reduce_bytes];
  using vec = logit_vector<T>;
  constexpr int W = vec::width;
  const std::size_t row =
      static_cast<std::size_t>(blockIdx.x) * (logits_block_threads / THREADS) + threadIdx.x / THREADS;
  const unsigned lane = threadIdx.x % THREADS;
  const bool active = row < rows;
  const T* x = logits + (active ? row : 0) * row_stride;

  lse_state st;
  if (active) {
    // Scalar head up to 16-byte alignment, vector body, scalar tail.
    const std::size_t misaligned = (reinterpret_cast<std::uintptr_t>(x) % 16) / sizeof(T);
    const std::size_t head = misaligned == 0 ? 0 : min_of<std::size_t>(W - misaligned, vocab);
    for (std::size_t v = lane; v < head; v += THREADS) {
      const float one[1] = {static_cast<float>(x[v]) * inverse_temperature};
      lse_add(st, one);
    }
    const std::size_t vectors = (vocab - head) / W;
    const T* body = x + head;
    std::size_t k = lane;
    for (; k + THREADS < vectors; k += 2 * THREADS) {  // two loads in flight per thread
      float a[W], b[W];
      vec::load(body + k * W, inverse_temperature, a);
      vec::load(body + (k + THREADS) * W, inverse_temperature, b);
      lse_add(st, a);
      lse_add(st, b);
    }
    if (k < vectors) {
      float a[W];
      vec::load(body + k * W, inverse_temperature, a);
      lse_add(st, a);
    }
    for (std::size_t v = head + vectors * W + lane; v < vocab; v += THREADS) {
      const float one[1] = {static_cast<float>(x[v]) * inverse_temperature};
      lse_add(st, one);
    }
  }
  if constexpr (THREADS == 32)
    st = team_reduce<32>(st, merge_lse{});
  else
    st = block_reduce(st, merge_lse{}, shared);
  if (!active || lane != 0) return;
  const std::int64_t label = labels[row];
  float label_logit = ::cuda::std::numeric_limits<float>::quiet_NaN();
  if (label >= 0 && static_cast<std::size_t>(label) < vocab)
    label_logit = static_cast<float>(x[label]) * inverse_temperature;
  else
    report_min(&report->first_bad_label, row);
  log_probs[row] = label_logit - log_sum_exp(st);
  if (entropy != nullptr) entropy[row] = entropy_of(st);
}

}  // namespace detail

// logits: rows of `vocab` values (float or __nv_bfloat16), row r at d_logits + r *
// row_stride. Writes d_log_probs[r] = log softmax(logits[r] / temperature)[labels[r]]
// (NaN and a report entry for a label outside [0, vocab)) and, when d_entropy is not
// null, the entropy of that softmax. Temporary storage: the device_report.
template <class T>
cudaError_t log_probs_from_logits(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                  const T* d_logits, std::size_t rows, std::size_t vocab,
                                  std::size_t row_stride, const std::int64_t* d_labels,
                                  float* d_log_probs, float* d_entropy, float temperature = 1.0f,
                                  cudaStream_t stream = nullptr) {
  device_report* report = nullptr;
  if (const detail::call_start start = detail::begin_report_call(d_temp_storage, temp_storage_bytes, report, stream);
      !start.proceed)
    return start.status;
  if (!(temperature > 0) || row_stride < vocab) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const float inverse = 1.0f / temperature;
  if (vocab <= detail::warp_row_vocab) {
    constexpr unsigned rows_per_block = detail::logits_block_threads / 32;
    return detail::launch(detail::log_probs_kernel<T, 32>, detail::blocks_for(rows, rows_per_block),
                          detail::logits_block_threads, stream, d_logits, rows, vocab, row_stride, d_labels,
                          inverse, d_log_probs, d_entropy, report);
  }
  return detail::launch(detail::log_probs_kernel<T, detail::logits_block_threads>, static_cast<unsigned>(rows),
                        detail::logits_block_threads, stream, d_logits, rows, vocab, row_stride, d_labels,
                        inverse, d_log_probs, d_entropy, report);
}

}  // namespace cascade_rl::cuda

namespace cascade_rl {

// The throwing convenience overload; spans in device memory. entropy may be empty.
template <class T>
void log_probs_from_logits(exec::cuda_policy policy, std::span<const T> logits, std::size_t vocab,
                           std::size_t row_stride, std::span<const std::int64_t> labels,
                           std::span<float> log_probs, std::span<float> entropy,
                           float temperature = 1.0f) {
  const std::size_t rows = labels.size();
  if (row_stride < vocab) detail::fail("row_stride", "is smaller than vocab");
  if (!(temperature > 0)) detail::fail("temperature", "must be > 0");
  if (rows > 0 && logits.size() < (rows - 1) * row_stride + vocab)
    detail::fail("logits", "has " + std::to_string(logits.size()) + " entries, too few for " +
                               std::to_string(rows) + " rows of stride " + std::to_string(row_stride));
  detail::require_size(log_probs.size(), rows, "log_probs", "one per label");
  if (!entropy.empty()) detail::require_size(entropy.size(), rows, "entropy", "one per label, or empty");
  cuda::detail::throw_if_reported(
      cuda::detail::run_and_report(policy.stream,
                                   [&](void* temp, std::size_t& bytes) {
                                     return cuda::log_probs_from_logits(
                                         temp, bytes, logits.data(), rows, vocab, row_stride, labels.data(),
                                         log_probs.data(), entropy.empty() ? nullptr : entropy.data(),
                                         temperature, policy.stream);
                                   }),
      {});
}

}  // namespace cascade_rl
