#pragma once
// The bypass mode (algorithms/rollout_correction.hpp's bypass_mode_loss) on the portable
// path: the rollout correction, then the loss on the tokens it keeps.

#include <thrust/device_ptr.h>

#include <vector>

#include "cascade_rl/algorithms/rollout_correction.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/cuda/portable/rollout_correction.hpp"
#include "cascade_rl/cuda/portable/token_losses.hpp"

namespace cascade_rl::cuda::portable {

// The scratch of bypass_mode_loss, in the system's memory: the correction's (row:
// rollout_row_scratch(sequences) doubles, row_of: one per token, block_sums and
// block_extremes: rollout_block_sum_scratch / rollout_block_extreme_scratch(tokens)), the
// loss's tallies (scratch_tallies(tokens)) and, for loss reinforce, kl: two T per token.
template <class T>
struct bypass_mode_scratch {
  double* row = nullptr;
  std::size_t* row_of = nullptr;
  double* block_sums = nullptr;
  double* block_extremes = nullptr;
  loss_tally* tallies = nullptr;
  T* kl = nullptr;  // loss reinforce only
};

namespace detail {

// n values of the system's memory as a host vector (a copy between systems under CUDA,
// a plain copy under CPP and OMP).
template <class V>
std::vector<V> read_back(const V* values, std::size_t n) {
  std::vector<V> host(n);
  if (n > 0)
    thrust::copy(thrust::device_pointer_cast(values), thrust::device_pointer_cast(values + n),
                 host.begin());
  return host;
}

}  // namespace detail

// cascade_rl::bypass_mode_loss composed of the pieces above, each the host's bits: the
// correction's passes, its finish on host copies of their scratch and its normalisation;
// then ppo_clip_loss (old = rollout log-probs, no weights) or reinforce_loss (the
// correction's weights) on the same sequences with `keep` as mask, the normaliser given or
// a function of that effective layout (e.g. portable::local_loss_counts(exec,
// l).normalizer(mode, T)); REINFORCE's approx_kl is kl_penalty's k1 sum of (rollout_logp,
// logp) over it, as the host's plain masked sum. weights may be null when no IS level is
// set. The options are refused as the host refuses them; the inputs are not validated.
template <class ExecPolicy, class T, class Normalizer>
bypass_mode_result bypass_mode_loss(ExecPolicy&& exec, const device_token_layout& layout,
                                    const T* log_probs, const T* rollout_log_probs,
                                    const T* advantages, T* grad_out, const Normalizer& normalizer,
                                    const bypass_mode_options& options, T* weights,
                                    std::uint8_t* keep, const bypass_mode_scratch<T>& scratch) {
  if (options.ppo.importance.mode != importance_sampling::none)
    cascade_rl::detail::fail("options.ppo.importance",
                             "must be none: the bypass mode's ratio is already the correction");
  if (options.reinforce.importance.mode != importance_sampling::none)
    cascade_rl::detail::fail("options.reinforce.importance",
                             "must be none: the bypass mode's IS weights are the correction's");
  cascade_rl::detail::validate_rollout_correction_options(options.correction);
  const bool weighted = options.correction.is_level != rollout_is_level::none;
  const std::size_t n = layout.tokens;
  rollout_correction_passes(exec, layout, log_probs, rollout_log_probs, options.correction, weights,
                            keep, scratch.row, scratch.row_of, scratch.block_sums,
                            scratch.block_extremes);
  bypass_mode_result result;
  double factor = 1.0;
  result.correction = rollout_correction_finish(
      options.correction,
      detail::read_back(scratch.row, rollout_row_scratch(layout.sequences)).data(),
      layout.sequences, detail::read_back(scratch.block_sums, rollout_block_sum_scratch(n)).data(),
      detail::read_back(scratch.block_extremes, rollout_block_extreme_scratch(n)).data(), n,
      factor);
  if (weighted && factor != 1.0)
    rollout_correction_normalize(exec, layout, log_probs, rollout_log_probs, options.correction,
                                 factor, weights, keep, scratch.row, scratch.row_of);
  const device_token_layout effective{layout.offsets, keep, layout.sequences, layout.tokens};
  loss_normalizer norm;
  if constexpr (std::is_same_v<Normalizer, loss_normalizer>)
    norm = normalizer;
  else
    norm = normalizer(effective);
  const auto tally = [&] { return detail::read_back(scratch.tallies + result_index(n), 1)[0]; };
  policy_loss_result loss;
  if (options.loss == bypass_loss::ppo_clip) {
    ppo_clip_loss(exec, effective, log_probs, rollout_log_probs, advantages,
                  static_cast<const T*>(nullptr), static_cast<const T*>(nullptr), grad_out, norm,
                  options.ppo, scratch.tallies);
    loss = tally();
  } else {
    reinforce_loss(exec, effective, log_probs, advantages, static_cast<const T*>(nullptr),
                   weighted ? static_cast<const T*>(weights) : nullptr, grad_out, norm,
                   options.reinforce, scratch.tallies);
    loss = tally();
    kl_penalty(exec, effective, rollout_log_probs, log_probs, scratch.kl, scratch.kl + n,
               kl_options{.estimator = kl_estimator::k1}, scratch.tallies);
    loss.metrics.approx_kl_sum = tally().loss;
  }
  result.loss = loss.loss;
  result.metrics = loss.metrics;
  return result;
}

}  // namespace cascade_rl::cuda::portable
