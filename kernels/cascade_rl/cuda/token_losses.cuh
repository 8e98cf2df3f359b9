#pragma once
// Token losses over the ragged layout: REINFORCE (ratio and log-prob surrogates), PPO
// clip (clip-higher, dual clip), importance truncation and the MOPD band mask, KL
// estimators as a penalty or a loss, and aggregation of caller-computed token losses,
// under every aggregation mode of the host core.
//
// One kernel pass: each warp takes a block of 4096 tokens, writes dL/dlogp, and sums its
// loss in the canonical order of core/canonical_sum.hpp (32 interleaved lanes, then the
// butterfly, which is the canonical tree) into one partial; a second kernel adds the
// partials in block order on one thread. The loss is therefore the host's, bit for bit,
// wherever the per-token terms are (the CPU emulator runs the host's libm; a GPU awaits
// the library's own exp). Metric sums (approx_kl_sum) are not yet in the canonical order
// on the host, which sums them in index order per block. seq-mean-token-mean first counts each sequence's valid tokens (one warp per
// sequence), and a token finds its sequence by binary search over the offsets.
//
// local_loss_counts counts valid tokens and non-empty sequences (a warp per sequence,
// integer sums).
//
// CUB's shape: size query with d_temp_storage == nullptr, then the run; the result (loss
// and metrics: loss_tally, the host core's policy_loss_result) is written to d_result in
// device memory. The temporary storage starts with the device_report (report_of) that
// names non-finite inputs.

#include <cuda_runtime.h>

#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/core/canonical_sum.hpp"
#include "cascade_rl/cuda/detail/device.cuh"
#include "cascade_rl/cuda/detail/token_terms.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/group_advantages.cuh"
#include "cascade_rl/cuda/policy.hpp"

namespace cascade_rl::cuda {

// The loss and metrics of a call, as the host core returns them (one struct, one field
// list: terms/policy_loss_metrics.hpp).
using loss_tally = detail::loss_tally;

namespace detail {

// Token sums: a warp per block of the canonical sum order, 8 per CUDA block.
inline constexpr unsigned token_threads = 256;
inline constexpr unsigned token_warps = token_threads / 32;
inline constexpr std::size_t canonical_block = cascade_rl::detail::reduce_block_size;

// valid[s] = valid tokens of sequence s; one warp per sequence. Reports broken offsets.
template <int = 0>
__global__ void __launch_bounds__(256)
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
template <class T, class Term>
__global__ void __launch_bounds__(token_threads)
token_loss_kernel(device_token_layout layout, Term term, T* __restrict__ grad_out, loss_aggregation mode,
                  loss_normalizer normalizer, const unsigned long long* __restrict__ sequence_valid,
                  loss_tally* __restrict__ partials, device_report* report) {
  const double constant_weight = aggregation_weight<T>(mode, normalizer, 0);
  const std::size_t block = static_cast<std::size_t>(blockIdx.x) * token_warps + threadIdx.x / 32;
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
__global__ void __launch_bounds__(32)
combine_tallies_kernel(const loss_tally* __restrict__ partials, std::size_t count, loss_tally* result) {
  if (threadIdx.x != 0) return;
  loss_tally acc;
  for (std::size_t b = 0; b < count; ++b) acc = add_tallies{}(acc, partials[b]);
  *result = acc;
}

template <class T, class Term>
cudaError_t run_tokens(void* d_temp_storage, std::size_t& temp_storage_bytes,
                       const device_token_layout& layout, const Term& term, T* grad_out,
                       loss_aggregation mode, const loss_normalizer& normalizer,
                       loss_tally* d_result, cudaStream_t stream) {
  const bool per_sequence = mode == loss_aggregation::seq_mean_token_mean;
  const std::size_t blocks = (layout.tokens + canonical_block - 1) / canonical_block;
  const std::size_t tiles = (blocks + token_warps - 1) / token_warps;
  temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  loss_tally* partials = carve.take<loss_tally>(blocks);
  unsigned long long* valid = carve.take<unsigned long long>(per_sequence ? layout.sequences : 0);
  if (const call_start start = begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  if (per_sequence && layout.sequences > 0) {
    CASCADE_RL_CUDA_TRY(launch(sequence_valid_kernel<>, blocks_for(layout.sequences * 32, 256), 256, stream,
                               layout, valid, report));
  }
  if (tiles > 0) {
    CASCADE_RL_CUDA_TRY(launch(token_loss_kernel<T, Term>, static_cast<unsigned>(tiles), token_threads, stream,
                               layout, term, grad_out, mode, normalizer,
                               per_sequence ? valid : nullptr, partials, report));
  }
  return launch(combine_tallies_kernel<>, 1, 32, stream, partials, blocks, d_result);
}

// Per block of 8 sequences (a warp each): their valid tokens and non-empty sequences.
template <int = 0>
__global__ void __launch_bounds__(256)
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

template <int = 0>
__global__ void __launch_bounds__(256)
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

}  // namespace detail

// ---- the CUB-style layer ----------------------------------------------------------------

// The counts of one slice of a step (local_loss_counts of the host core): valid tokens and
// sequences with at least one valid token, written to d_counts. Sum them over slices and
// ranks into the loss_normalizer. The report names broken offsets.
inline cudaError_t local_loss_counts(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                     const device_token_layout& layout, loss_counts* d_counts,
                                     cudaStream_t stream = nullptr) {
  const unsigned blocks = detail::blocks_for(layout.sequences * 32, 256);
  detail::temp_carver carve(d_temp_storage);
  device_report* report = carve.take<device_report>(1);
  detail::valid_counts* partials = carve.take<detail::valid_counts>(blocks);
  if (const detail::call_start start = detail::begin_call(d_temp_storage, temp_storage_bytes, carve, report, stream);
      !start.proceed)
    return start.status;
  if (blocks > 0) {
    CASCADE_RL_CUDA_TRY(detail::launch(detail::loss_counts_kernel<>, blocks, 256, stream, layout, partials, report));
  }
  return detail::launch(detail::combine_counts_kernel<>, 1, 256, stream, partials, blocks, d_counts);
}

// d_behaviour may be null when options.importance.mode is none. d_result: one loss_tally.

template <class T>
cudaError_t reinforce_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                           const device_token_layout& layout, const T* d_log_probs,
                           const T* d_advantages, const T* d_behaviour, T* d_grad_out,
                           const loss_normalizer& normalizer, const reinforce_options& options,
                           loss_tally* d_result, cudaStream_t stream = nullptr) {
  const detail::reinforce_term<T> term{d_log_probs, d_advantages, d_behaviour,
                                       options.surrogate == reinforce_surrogate::log_prob,
                                       options.importance};
  return detail::run_tokens(d_temp_storage, temp_storage_bytes, layout, term, d_grad_out,
                            options.aggregation, normalizer, d_result, stream);
}

template <class T>
cudaError_t ppo_clip_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                          const device_token_layout& layout, const T* d_log_probs,
                          const T* d_old_log_probs, const T* d_advantages, const T* d_behaviour,
                          T* d_grad_out, const loss_normalizer& normalizer,
                          const ppo_clip_options& options, loss_tally* d_result,
                          cudaStream_t stream = nullptr) {
  const detail::ppo_term<T> term{d_log_probs, d_old_log_probs, d_advantages, d_behaviour,
                                 cascade_rl::detail::ppo_params_of(options), options.importance};
  return detail::run_tokens(d_temp_storage, temp_storage_bytes, layout, term, d_grad_out,
                            options.aggregation, normalizer, d_result, stream);
}

// d_values_out may be null; d_result->loss is the sum of k_t over valid tokens.
template <class T>
cudaError_t kl_penalty(void* d_temp_storage, std::size_t& temp_storage_bytes,
                       const device_token_layout& layout, const T* d_log_probs,
                       const T* d_ref_log_probs, T* d_values_out, T* d_grad_out,
                       const kl_options& options, loss_tally* d_result, cudaStream_t stream = nullptr) {
  const detail::kl_term<T> term{d_log_probs, d_ref_log_probs, options, 1.0, d_values_out};
  return detail::run_tokens(d_temp_storage, temp_storage_bytes, layout, term, d_grad_out,
                            loss_aggregation::token_sum, loss_normalizer{}, d_result, stream);
}

template <class T>
cudaError_t kl_loss(void* d_temp_storage, std::size_t& temp_storage_bytes,
                    const device_token_layout& layout, const T* d_log_probs,
                    const T* d_ref_log_probs, T* d_grad_out, const loss_normalizer& normalizer,
                    const kl_loss_options& options, loss_tally* d_result, cudaStream_t stream = nullptr) {
  const detail::kl_term<T> term{d_log_probs, d_ref_log_probs, options.kl,
                                options.coefficient, nullptr};
  return detail::run_tokens(d_temp_storage, temp_storage_bytes, layout, term, d_grad_out,
                            options.aggregation, normalizer, d_result, stream);
}

template <class T>
cudaError_t aggregate_token_losses(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                   const device_token_layout& layout, const T* d_token_losses,
                                   const T* d_token_grads, T* d_grad_out,
                                   const loss_normalizer& normalizer, loss_aggregation mode,
                                   loss_tally* d_result, cudaStream_t stream = nullptr) {
  return detail::run_tokens(d_temp_storage, temp_storage_bytes, layout,
                            detail::aggregate_term<T>{d_token_losses, d_token_grads}, d_grad_out,
                            mode, normalizer, d_result, stream);
}

namespace detail {

// Runs a token function with owned temporary storage (the result at its end), waits,
// throws what the report holds and refuses a normaliser the mode divides by when the
// batch has valid tokens (as detail::validate_normalizer of the host core).
// Term names the inputs a report may point at (Term::arguments).
template <class Term, class Run>
loss_tally run_tokens_throwing(cudaStream_t stream, loss_aggregation mode,
                               const loss_normalizer& normalizer, Run run) {
  const auto [report, tally] = run_and_report_result<loss_tally>(stream, run);
  throw_if_reported(report, Term::arguments);
  // Counts only matter when a token used them; the host core checks the same way.
  if (tally.metrics.valid_tokens > 0) cascade_rl::detail::require_normalizer_for(mode, normalizer);
  return tally;
}

inline void require_tokens(std::size_t size, const device_token_layout& layout, const char* name) {
  cascade_rl::detail::require_size(size, layout.tokens, name, "one per token");
}

template <class T>
const T* behaviour_of(std::span<const T> behaviour, const device_token_layout& layout,
                      const importance_options& importance) {
  if (importance.mode == importance_sampling::none) {
    if (!behaviour.empty()) require_tokens(behaviour.size(), layout, "behaviour_log_probs");
    return nullptr;
  }
  if (behaviour.empty() && layout.tokens > 0)
    cascade_rl::detail::fail("behaviour_log_probs", "is empty, but the importance correction needs one per token");
  require_tokens(behaviour.size(), layout, "behaviour_log_probs");
  return behaviour.data();
}

}  // namespace detail
}  // namespace cascade_rl::cuda

// ---- the throwing convenience layer -----------------------------------------------------
// Spans point to device memory; each call waits for its stream to return the loss.

namespace cascade_rl {

// The counts of one slice of a step; the layout's arrays in device memory. Waits for the
// stream.
inline loss_counts local_loss_counts(exec::cuda_policy policy, const cuda::device_token_layout& layout) {
  const auto [report, counts] = cuda::detail::run_and_report_result<loss_counts>(
      policy.stream, [&](void* temp, std::size_t& bytes, loss_counts* result) {
        return cuda::local_loss_counts(temp, bytes, layout, result, policy.stream);
      });
  cuda::detail::throw_if_reported(report, {});
  return counts;
}

template <std::floating_point T>
policy_loss_result reinforce_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                                  std::span<const T> log_probs, std::span<const T> advantages,
                                  std::span<const T> behaviour_log_probs, std::span<T> grad_out,
                                  const loss_normalizer& normalizer,
                                  const reinforce_options& options = {}) {
  detail::validate_importance(options.importance, "options.importance");
  cuda::detail::require_tokens(log_probs.size(), layout, "log_probs");
  cuda::detail::require_tokens(advantages.size(), layout, "advantages");
  const T* behaviour = cuda::detail::behaviour_of(behaviour_log_probs, layout, options.importance);
  cuda::detail::require_tokens(grad_out.size(), layout, "grad_out");
  return cuda::detail::run_tokens_throwing<cuda::detail::reinforce_term<T>>(
      policy.stream, options.aggregation, normalizer, [&](void* temp, std::size_t& bytes, cuda::loss_tally* result) {
        return cuda::reinforce_loss(temp, bytes, layout, log_probs.data(), advantages.data(),
                                    behaviour, grad_out.data(), normalizer, options, result,
                                    policy.stream);
      });
}

template <std::floating_point T>
policy_loss_result ppo_clip_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                                 std::span<const T> log_probs, std::span<const T> old_log_probs,
                                 std::span<const T> advantages,
                                 std::span<const T> behaviour_log_probs, std::span<T> grad_out,
                                 const loss_normalizer& normalizer,
                                 const ppo_clip_options& options = {}) {
  detail::validate_ppo_options(options);
  cuda::detail::require_tokens(log_probs.size(), layout, "log_probs");
  cuda::detail::require_tokens(old_log_probs.size(), layout, "old_log_probs");
  cuda::detail::require_tokens(advantages.size(), layout, "advantages");
  const T* behaviour = cuda::detail::behaviour_of(behaviour_log_probs, layout, options.importance);
  cuda::detail::require_tokens(grad_out.size(), layout, "grad_out");
  return cuda::detail::run_tokens_throwing<cuda::detail::ppo_term<T>>(
      policy.stream, options.aggregation, normalizer, [&](void* temp, std::size_t& bytes, cuda::loss_tally* result) {
        return cuda::ppo_clip_loss(temp, bytes, layout, log_probs.data(), old_log_probs.data(),
                                   advantages.data(), behaviour, grad_out.data(), normalizer,
                                   options, result, policy.stream);
      });
}

template <std::floating_point T>
double kl_penalty(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                  std::span<const T> log_probs, std::span<const T> ref_log_probs,
                  std::span<T> values_out, std::span<T> grad_out, const kl_options& options = {}) {
  detail::validate_kl_options(options, "options");
  cuda::detail::require_tokens(log_probs.size(), layout, "log_probs");
  cuda::detail::require_tokens(ref_log_probs.size(), layout, "ref_log_probs");
  cuda::detail::require_tokens(values_out.size(), layout, "values_out");
  cuda::detail::require_tokens(grad_out.size(), layout, "grad_out");
  return cuda::detail::run_tokens_throwing<cuda::detail::kl_term<T>>(
             policy.stream, loss_aggregation::token_sum, {},
             [&](void* temp, std::size_t& bytes, cuda::loss_tally* result) {
               return cuda::kl_penalty(temp, bytes, layout, log_probs.data(), ref_log_probs.data(),
                                       values_out.data(), grad_out.data(), options, result,
                                       policy.stream);
             })
      .loss;
}

template <std::floating_point T>
double kl_loss(exec::cuda_policy policy, const cuda::device_token_layout& layout,
               std::span<const T> log_probs, std::span<const T> ref_log_probs,
               std::span<T> grad_out, const loss_normalizer& normalizer,
               const kl_loss_options& options = {}) {
  detail::validate_kl_options(options.kl, "options.kl");
  if (!std::isfinite(options.coefficient)) detail::fail("options.coefficient", "is not finite");
  cuda::detail::require_tokens(log_probs.size(), layout, "log_probs");
  cuda::detail::require_tokens(ref_log_probs.size(), layout, "ref_log_probs");
  cuda::detail::require_tokens(grad_out.size(), layout, "grad_out");
  return cuda::detail::run_tokens_throwing<cuda::detail::kl_term<T>>(
             policy.stream, options.aggregation, normalizer,
             [&](void* temp, std::size_t& bytes, cuda::loss_tally* result) {
               return cuda::kl_loss(temp, bytes, layout, log_probs.data(), ref_log_probs.data(),
                                    grad_out.data(), normalizer, options, result, policy.stream);
             })
      .loss;
}

template <std::floating_point T>
double aggregate_token_losses(exec::cuda_policy policy, const cuda::device_token_layout& layout,
                              std::span<const T> token_losses, std::span<const T> token_grads,
                              std::span<T> grad_out, const loss_normalizer& normalizer,
                              loss_aggregation mode) {
  cuda::detail::require_tokens(token_losses.size(), layout, "token_losses");
  cuda::detail::require_tokens(token_grads.size(), layout, "token_grads");
  cuda::detail::require_tokens(grad_out.size(), layout, "grad_out");
  return cuda::detail::run_tokens_throwing<cuda::detail::aggregate_term<T>>(
             policy.stream, mode, normalizer,
             [&](void* temp, std::size_t& bytes, cuda::loss_tally* result) {
               return cuda::aggregate_token_losses(temp, bytes, layout, token_losses.data(),
                                                   token_grads.data(), grad_out.data(), normalizer,
                                                   mode, result, policy.stream);
             })
      .loss;
}

}  // namespace cascade_rl
