#pragma once
// The CUB-shaped layer of GPG. Size query with d_temp_storage == nullptr, then the run;
// the temporary storage starts with the device_report (report_of): broken offsets, NaN
// or infinite scores under nonfinite_rule::error (first_nonfinite[0]) and groups of one
// under singleton_rule::error (first_singleton). Options the host core refuses return
// cudaErrorInvalidValue.

#include <cuda_runtime.h>

#include <cstddef>

#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/tuning.hpp"
#include "cascade_rl/cuda/kernel/gpg_advantages.cuh"
#include "cascade_rl/options/group_estimators.hpp"

namespace cascade_rl::cuda {
namespace detail {

inline bool usable_gpg(const gpg_options& o) {
  return o.f_norm > 0.0 && ::cuda::std::isfinite(o.f_norm) &&
         o.accumulation != mean_accumulation::float32_rounded_sum;
}

}  // namespace detail

// alpha (s_i - mean_g) / f_norm per sequence, alpha = N / max(non-zero scores, 1).
template <tuning_policy Tuning = default_tuning, class T>
cudaError_t gpg_advantages(void* d_temp_storage, std::size_t& temp_storage_bytes, const T* d_scores,
                           const device_group_layout& groups, T* d_advantages,
                           const gpg_options& options = {}, cudaStream_t stream = nullptr) {
  if (!detail::usable_gpg(options)) return cudaErrorInvalidValue;
  const std::size_t n = groups.sequences;
  const std::size_t blocks = (n + detail::gpg_count_block - 1) / detail::gpg_count_block;
  constexpr unsigned threads = Tuning::thread_item_block_threads;
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  unsigned long long* partials = carve.take<unsigned long long>(blocks);
  double* scale = carve.take<double>(1);
  if (const detail::call_start start =
          detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  if (groups.groups == 0) return cudaSuccess;
  if (blocks > 0) {
    CASCADE_RL_CUDA_TRY(detail::launch(detail::gpg_count_kernel<Tuning, T>,
                                       detail::blocks_for(blocks, threads), threads, stream, d_scores, n, partials));
  }
  CASCADE_RL_CUDA_TRY(detail::launch(detail::gpg_scale_kernel<>, 1, detail::combine_block_threads, stream,
                                     partials, blocks, n, options.f_norm, scale));
  return detail::launch(detail::gpg_kernel<Tuning, T>, detail::blocks_for(groups.groups, threads), threads,
                        stream, d_scores, groups, d_advantages,
                        static_cast<const double*>(scale), options, report);
}

}  // namespace cascade_rl::cuda
