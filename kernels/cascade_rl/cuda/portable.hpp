#pragma once
// The portable path: every device algorithm written with Thrust algorithms and the
// per-element formulas of detail/math.hpp, for any Thrust system. Under the CPP and OMP
// systems (a g++ build with -DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP or _OMP)
// it runs on the host and the test suite checks it against exec::seq without a GPU;
// under nvcc it runs on the device with thrust::cuda::par.on(stream).
//
// It keeps the host core's structure: groups and rows are reduced sequentially one
// per Thrust work item, token sums over fixed blocks of detail::reduce_block_size
// tokens in the canonical order (core/canonical_sum.hpp). Under CPP and OMP it
// therefore gives the same bits as exec::seq for any thread count. The CUB kernels
// (*.cuh) are the fast path; this one is the reference that runs everywhere.
//
// Pointers are in the memory of the policy's system. Inputs are not validated here
// (the convenience layer over the CUB path does that); callers own every buffer. The
// token-level advantages (broadcast, distillation, REINFORCE++) are in
// portable_tokens.hpp, included at the end.

#include <thrust/copy.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/gather.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/scan.h>
#include <thrust/transform_reduce.h>

#include <cuda/std/cmath>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cascade_rl/core/canonical_sum.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/cuda/detail/group_flags.hpp"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/detail/token_terms.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/options/kl.hpp"
#include "cascade_rl/options/loss_normalizer.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/group_advantage.hpp"
#include "cascade_rl/terms/log_softmax_gradient.hpp"
#include "cascade_rl/terms/log_sum_exp.hpp"
#include "cascade_rl/terms/policy_gradient_tokens.hpp"
#include "cascade_rl/terms/ratio_loss_tokens.hpp"
#include "cascade_rl/terms/sequence_ratio_tokens.hpp"

namespace cascade_rl::cuda::portable {

using detail::loss_tally;

namespace detail {

using namespace cascade_rl::cuda::detail;

template <class ExecPolicy, class F>
void for_each_index(ExecPolicy&& exec, std::size_t n, F f) {
  if (n == 0) return;
  thrust::for_each_n(exec, thrust::counting_iterator<std::size_t>(0), n, f);
}

// The moments of values[first, last) as the host core computes them
// (terms::group_moments_of); nonfinite when a value is NaN or infinite (then nothing
// else is computed).
template <class T>
CASCADE_RL_HD group_moments sequential_moments(const T* values, std::size_t first, std::size_t last,
                                               mean_accumulation accumulation) {
  for (std::size_t i = first; i < last; ++i)
    if (!::cuda::std::isfinite(values[i])) {
      group_moments m;
      m.count = last - first;
      m.nonfinite = true;
      return m;
    }
  if (first == last) return group_moments{};
  return terms::group_moments_of(values, first, last, accumulation);
}

// One group, sequentially, as the host core reduces it.
template <class T>
struct group_functor {
  const T* rewards;
  device_group_layout groups;
  T* advantages;                 // null: statistics only
  group_statistic* statistics;   // null: not wanted
  group_params p;

  CASCADE_RL_HD void operator()(std::size_t g) const {
    const std::size_t first = groups.begin(g);
    const std::size_t last = groups.end(g);
    const group_moments m = sequential_moments(rewards, first, last, p.accumulation);
    if (statistics != nullptr) statistics[g] = statistic_of(m, p.estimator);
    if (advantages == nullptr) return;
    const group_plan plan = plan_group(m, p);
    for (std::size_t i = first; i < last; ++i) advantages[i] = advantage_of(rewards[i], m, plan, p);
  }
};

// leave_one_out_statistics of the host core, one group.
template <class T>
struct leave_one_out_functor {
  const T* rewards;
  device_group_layout groups;
  T* loo_mean;
  T* loo_std;  // null: not wanted
  std_estimator estimator;

  CASCADE_RL_HD void operator()(std::size_t g) const {
    const std::size_t first = groups.begin(g);
    const std::size_t last = groups.end(g);
    const group_moments m =
        sequential_moments(rewards, first, last, mean_accumulation::double_precision);
    for (std::size_t i = first; i < last; ++i) {
      const terms::leave_one_out_value v = terms::leave_one_out_of(rewards[i], m, estimator);
      loo_mean[i] = static_cast<T>(v.mean);
      if (loo_std != nullptr) loo_std[i] = static_cast<T>(v.std);
    }
  }
};

// The valid tokens of one sequence, for local_loss_counts.
struct sequence_counts_functor {
  device_token_layout layout;
  CASCADE_RL_HD valid_counts operator()(std::size_t s) const {
    unsigned long long n = 0;
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) n += layout.valid(t);
    return counts_of_sequence(n);
  }
};

// grad_out[t] = c_t (0 on masked tokens), as detail::write_aggregation_weights does.
template <class T>
struct sequence_weights_functor {
  device_token_layout layout;
  loss_normalizer normalizer;
  T* grad_out;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    unsigned long long n = 0;
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) n += layout.valid(t);
    const T c = static_cast<T>(aggregation_weight<T>(loss_aggregation::seq_mean_token_mean, normalizer, n));
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
      grad_out[t] = layout.valid(t) ? c : T(0);
  }
};

template <class T>
struct token_weights_functor {
  device_token_layout layout;
  T weight;
  T* grad_out;
  CASCADE_RL_HD void operator()(std::size_t t) const { grad_out[t] = layout.valid(t) ? weight : T(0); }
};

// One block of detail::reduce_block_size tokens, as detail::weighted_token_losses does:
// every floating-point sum of the tally (the loss, approx_kl) in the canonical order of
// core/canonical_sum.hpp, a tally per lane (token t in lane t mod 32) folded by the tree.
template <class T, class Term>
struct token_block_functor {
  device_token_layout layout;
  Term term;
  T* grad_out;
  loss_tally* partials;
  CASCADE_RL_HD void operator()(std::size_t b) const {
    const std::size_t first = b * cascade_rl::detail::reduce_block_size;
    const std::size_t last = min_of(first + cascade_rl::detail::reduce_block_size, layout.tokens);
    loss_tally lanes[cascade_rl::detail::reduce_lanes];
    for (std::size_t t = first; t < last; ++t) {
      if (!layout.valid(t)) {
        grad_out[t] = T(0);
        term.on_masked(t);
        continue;
      }
      loss_tally& acc = lanes[(t - first) % cascade_rl::detail::reduce_lanes];
      const double c = static_cast<double>(grad_out[t]);
      ++acc.metrics.valid_tokens;
      const terms::token_loss l = term(t, acc);
      acc.loss += math::product_rn(c, l.value);  // rounded alone, as on the host
      grad_out[t] = static_cast<T>(c * l.grad);
    }
    partials[b] = cascade_rl::detail::fold_lanes(lanes, add_tallies{});
  }
};

// partials[blocks] = the block results joined in block order.
struct combine_functor {
  loss_tally* partials;
  std::size_t blocks;
  CASCADE_RL_HD void operator()(std::size_t) const {
    loss_tally total;
    for (std::size_t b = 0; b < blocks; ++b) total = add_tallies{}(total, partials[b]);
    partials[blocks] = total;
  }
};

template <class T, class ExecPolicy, class Term>
void reduce_tokens(ExecPolicy&& exec, const device_token_layout& layout, Term term,
                   T* grad_out, loss_aggregation mode, const loss_normalizer& normalizer,
                   loss_tally* scratch) {
  if (mode == loss_aggregation::seq_mean_token_mean) {
    for_each_index(exec, layout.sequences, sequence_weights_functor<T>{layout, normalizer, grad_out});
  } else {
    const T c = static_cast<T>(aggregation_weight<T>(mode, normalizer, 0));
    for_each_index(exec, layout.tokens, token_weights_functor<T>{layout, c, grad_out});
  }
  const std::size_t blocks =
      (layout.tokens + cascade_rl::detail::reduce_block_size - 1) / cascade_rl::detail::reduce_block_size;
  for_each_index(exec, blocks, token_block_functor<T, Term>{layout, term, grad_out, scratch});
  for_each_index(exec, 1, combine_functor{scratch, blocks});
}

// One thread per row, in the order of terms/log_sum_exp.hpp (the host's bits).
template <class T>
struct log_probs_functor {
  const T* logits;
  std::size_t row_stride;
  std::size_t vocab;
  const std::int64_t* labels;
  float inverse_temperature;
  float* log_probs;
  float* entropy;
  CASCADE_RL_HD void operator()(std::size_t row) const {
    const T* x = logits + row * row_stride;
    terms::lse_state st;
    for (std::size_t v = 0; v < vocab; v += terms::lse_chunk)
      terms::lse_fold_chunk_serial(st, x + v, min_of(terms::lse_chunk, vocab - v), inverse_temperature);
    const std::int64_t label = labels[row];
    const bool in_range = label >= 0 && static_cast<std::size_t>(label) < vocab;
    const float label_logit = in_range ? static_cast<float>(x[label]) * inverse_temperature
                                       : math::detail::quiet_nan_f;
    log_probs[row] = terms::log_prob_of(st, label_logit);
    if (entropy != nullptr) entropy[row] = terms::entropy_of(st);
  }
};

// log_probs_backward: one thread per row, the row's state in the forward's order, then
// each logit's gradient (terms/log_softmax_gradient.hpp). A label outside [0, vocab)
// matches no logit; entropy_seeds may be null.
template <class T>
struct log_probs_backward_functor {
  const T* logits;
  std::size_t row_stride;
  std::size_t vocab;
  const std::int64_t* labels;
  const float* log_prob_seeds;
  const float* entropy_seeds;
  float inverse_temperature;
  float* grad_logits;
  CASCADE_RL_HD void operator()(std::size_t row) const {
    const T* x = logits + row * row_stride;
    terms::lse_state st;
    for (std::size_t v = 0; v < vocab; v += terms::lse_chunk)
      terms::lse_fold_chunk_serial(st, x + v, min_of(terms::lse_chunk, vocab - v),
                                   inverse_temperature);
    const terms::softmax_row softmax = terms::softmax_row_of(st);
    const double g = log_prob_seeds[row];
    const double h = entropy_seeds == nullptr ? 0.0 : static_cast<double>(entropy_seeds[row]);
    const std::int64_t label = labels[row];
    float* out = grad_logits + row * row_stride;
    for (std::size_t v = 0; v < vocab; ++v)
      out[v] = terms::logit_gradient(static_cast<float>(x[v]) * inverse_temperature,
                                     label >= 0 && static_cast<std::size_t>(label) == v, softmax, g,
                                     h, inverse_temperature);
  }
};

struct is_set {
  CASCADE_RL_HD bool operator()(std::uint8_t flag) const { return flag != 0; }
};

}  // namespace detail

// ---- group statistics and advantages --------------------------------------------------

template <class ExecPolicy, class T>
void group_statistics(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                      group_statistic* statistics, const group_statistics_options& options = {}) {
  detail::for_each_index(exec, groups.groups,
                         detail::group_functor<T>{rewards, groups, nullptr, statistics,
                                                  detail::group_params_of(options)});
}

// statistics may be null; when given, it receives each group's statistics computed under
// the advantage's own accumulation and estimator.
template <class ExecPolicy, class T>
void grpo_advantages(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                     T* advantages, group_statistic* statistics, const grpo_options& options = {}) {
  detail::for_each_index(exec, groups.groups,
                         detail::group_functor<T>{rewards, groups, advantages, statistics,
                                                  detail::group_params_of(options)});
}

template <class ExecPolicy, class T>
void rloo_advantages(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                     T* advantages, group_statistic* statistics, const rloo_options& options = {}) {
  detail::for_each_index(exec, groups.groups,
                         detail::group_functor<T>{rewards, groups, advantages, statistics,
                                                  detail::group_params_of(options)});
}

// Per sequence, the mean and (when loo_std is not null) the std of the other rewards of
// its group (groups of at least 2).
template <class ExecPolicy, class T>
void leave_one_out_statistics(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                              T* loo_mean, T* loo_std, const leave_one_out_options& options = {}) {
  detail::for_each_index(exec, groups.groups,
                         detail::leave_one_out_functor<T>{
                             rewards, groups, loo_mean, loo_std, options.estimator});
}

// ---- token losses -----------------------------------------------------------------------

// The counts of one slice of a step: valid tokens and sequences with at least one.
template <class ExecPolicy>
[[nodiscard]] loss_counts local_loss_counts(ExecPolicy&& exec, const device_token_layout& layout) {
  if (layout.sequences == 0) return {};
  const thrust::counting_iterator<std::size_t> index(0);
  return detail::to_loss_counts(thrust::transform_reduce(
      exec, index, index + layout.sequences, detail::sequence_counts_functor{layout},
      detail::valid_counts{}, detail::add_valid_counts{}));
}

// Entries of `scratch` a token loss over `tokens` tokens needs; the result is the last.
[[nodiscard]] inline std::size_t scratch_tallies(std::size_t tokens) {
  return (tokens + cascade_rl::detail::reduce_block_size - 1) / cascade_rl::detail::reduce_block_size + 1;
}
[[nodiscard]] inline std::size_t result_index(std::size_t tokens) { return scratch_tallies(tokens) - 1; }

// behaviour may be null when options.importance.mode is none, rollout_is_weights when
// there are none.
template <class ExecPolicy, class T>
void reinforce_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                    const T* advantages, const T* behaviour, const T* rollout_is_weights,
                    T* grad_out, const loss_normalizer& normalizer,
                    const reinforce_options& options, loss_tally* scratch) {
  const detail::reinforce_term<T> term{log_probs,
                                       advantages,
                                       behaviour,
                                       rollout_is_weights,
                                       options.surrogate == reinforce_surrogate::log_prob,
                                       options.importance};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

// behaviour and rollout_is_weights as for reinforce_loss.
template <class ExecPolicy, class T>
void ppo_clip_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                   const T* old_log_probs, const T* advantages, const T* behaviour,
                   const T* rollout_is_weights, T* grad_out, const loss_normalizer& normalizer,
                   const ppo_clip_options& options, loss_tally* scratch) {
  const detail::ppo_term<T> term{log_probs,          old_log_probs,
                                 advantages,         behaviour,
                                 rollout_is_weights, cascade_rl::detail::ppo_params_of(options),
                                 options.importance};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

namespace detail {

// The ratio losses (CISPO, DPPO, DRO, SAPO): the options' token function
// (visit_ratio_token) as a ratio_term.
template <class ExecPolicy, class T, class Options>
void ratio_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
                T* grad_out, const loss_normalizer& normalizer, const Options& options,
                loss_tally* scratch) {
  cascade_rl::detail::visit_ratio_token(options, [&](const auto& token) {
    const ratio_term<T, std::decay_t<decltype(token)>> term{log_probs, old_log_probs, advantages,
                                                            rollout_is_weights, token};
    reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
  });
}

}  // namespace detail

// rollout_is_weights may be null (no weights) in the four ratio losses.

template <class ExecPolicy, class T>
void cispo_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
                T* grad_out, const loss_normalizer& normalizer, const cispo_options& options,
                loss_tally* scratch) {
  detail::ratio_loss(exec, layout, log_probs, old_log_probs, advantages, rollout_is_weights,
                     grad_out, normalizer, options, scratch);
}

template <class ExecPolicy, class T>
void dppo_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
               const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
               T* grad_out, const loss_normalizer& normalizer, const dppo_options& options,
               loss_tally* scratch) {
  detail::ratio_loss(exec, layout, log_probs, old_log_probs, advantages, rollout_is_weights,
                     grad_out, normalizer, options, scratch);
}

template <class ExecPolicy, class T>
void dro_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
              const T* old_log_probs, const T* advantages, const T* rollout_is_weights, T* grad_out,
              const loss_normalizer& normalizer, const dro_options& options, loss_tally* scratch) {
  detail::ratio_loss(exec, layout, log_probs, old_log_probs, advantages, rollout_is_weights,
                     grad_out, normalizer, options, scratch);
}

template <class ExecPolicy, class T>
void sapo_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
               const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
               T* grad_out, const loss_normalizer& normalizer, const sapo_options& options,
               loss_tally* scratch) {
  detail::ratio_loss(exec, layout, log_probs, old_log_probs, advantages, rollout_is_weights,
                     grad_out, normalizer, options, scratch);
}

// values_out may be null. The result's loss is the sum of k_t over valid tokens.
template <class ExecPolicy, class T>
void kl_penalty(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                const T* ref_log_probs, T* values_out, T* grad_out, const kl_options& options,
                loss_tally* scratch) {
  const detail::kl_term<T> term{log_probs, ref_log_probs, options, 1.0, values_out};
  detail::reduce_tokens(exec, layout, term, grad_out, loss_aggregation::token_sum, {}, scratch);
}

template <class ExecPolicy, class T>
void kl_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
             const T* ref_log_probs, T* grad_out, const loss_normalizer& normalizer,
             const kl_loss_options& options, loss_tally* scratch) {
  const detail::kl_term<T> term{log_probs, ref_log_probs, options.kl,
                                options.coefficient, nullptr};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

template <class ExecPolicy, class T>
void aggregate_token_losses(ExecPolicy&& exec, const device_token_layout& layout,
                            const T* token_losses, const T* token_grads, T* grad_out,
                            const loss_normalizer& normalizer, loss_aggregation mode,
                            loss_tally* scratch) {
  detail::reduce_tokens(exec, layout, detail::aggregate_term<T>{token_losses, token_grads},
                        grad_out, mode, normalizer, scratch);
}

// ---- log-probs and entropy from logits -------------------------------------------------

// logits: `rows` rows of `vocab` values, row r at logits + r * row_stride. Writes the
// log-probability of labels[r] (NaN for a label outside [0, vocab)) and, when entropy
// is not null, the entropy of the row's softmax; both of logits * inverse_temperature.
template <class ExecPolicy, class T>
void log_probs_from_logits(ExecPolicy&& exec, const T* logits, std::size_t rows,
                           std::size_t vocab, std::size_t row_stride, const std::int64_t* labels,
                           float* log_probs, float* entropy, float inverse_temperature = 1.0f) {
  detail::for_each_index(exec, rows,
                         detail::log_probs_functor<T>{logits, row_stride, vocab, labels,
                                                      inverse_temperature, log_probs, entropy});
}

// dL/dlogits from the seeds dL/dlogp and dL/dH per row (entropy_seeds may be null):
// grad_logits laid out like the logits, columns [0, vocab) of each row written.
template <class ExecPolicy, class T>
void log_probs_backward(ExecPolicy&& exec, const T* logits, std::size_t rows, std::size_t vocab,
                        std::size_t row_stride, const std::int64_t* labels,
                        const float* log_prob_seeds, const float* entropy_seeds, float* grad_logits,
                        float inverse_temperature = 1.0f) {
  detail::for_each_index(
      exec, rows,
      detail::log_probs_backward_functor<T>{logits, row_stride, vocab, labels, log_prob_seeds,
                                            entropy_seeds, inverse_temperature, grad_logits});
}

// ---- zero-variance group filtering -------------------------------------------------------

struct filter_counts {
  std::size_t kept_sequences = 0;
  std::size_t kept_groups = 0;
};

// Drops the groups whose rewards are all equal or hold a NaN or infinite value. Writes
// keep_group[g] (groups), the input indices of the kept sequences (up to
// groups.sequences) and the offsets of the kept groups over them (up to groups.groups + 1
// entries); scratch holds groups.groups values.
template <class ExecPolicy, class T>
filter_counts drop_zero_variance_groups(ExecPolicy&& exec, const T* rewards,
                                        const device_group_layout& groups,
                                        std::uint8_t* keep_group, std::uint8_t* keep_sequence,
                                        std::int64_t* kept_sequences,
                                        std::int64_t* kept_group_offsets, std::int64_t* scratch) {
  detail::for_each_index(exec, groups.groups,
                         detail::group_filter_functor<T>{rewards, groups, keep_group, keep_sequence});
  const thrust::counting_iterator<std::int64_t> index(0);
  filter_counts counts;
  counts.kept_sequences = static_cast<std::size_t>(
      thrust::copy_if(exec, index, index + static_cast<std::int64_t>(groups.sequences),
                      keep_sequence, kept_sequences, detail::is_set{}) -
      kept_sequences);
  thrust::fill_n(exec, kept_group_offsets, 1, std::int64_t{0});
  if (groups.groups == 0) return counts;
  const auto sizes = thrust::make_transform_iterator(
      thrust::counting_iterator<std::size_t>(0), detail::kept_group_size{groups, keep_group});
  thrust::inclusive_scan(exec, sizes, sizes + groups.groups, scratch);
  counts.kept_groups = static_cast<std::size_t>(
      thrust::copy_if(exec, scratch, scratch + groups.groups, keep_group, kept_group_offsets + 1,
                      detail::is_set{}) -
      (kept_group_offsets + 1));
  return counts;
}

// flags[g] = 1 where group g's rewards are all equal (a group of one included).
template <class ExecPolicy, class T>
void zero_variance_groups(ExecPolicy&& exec, const T* rewards, const device_group_layout& groups,
                          std::uint8_t* flags) {
  detail::for_each_index(exec, groups.groups, detail::zero_variance_functor<T>{rewards, groups, flags});
}

// out[k] = in[kept_sequences[k]] for k in [0, kept): compacts a per-sequence array (of any
// trivially copyable type) with the indices of a selection.
template <class ExecPolicy, class V, class I>
void gather_sequences(ExecPolicy&& exec, const V* in, const I* kept_sequences, std::size_t kept, V* out) {
  if (kept == 0) return;
  thrust::gather(exec, kept_sequences, kept_sequences + kept, in, out);
}

}  // namespace cascade_rl::cuda::portable

#include "cascade_rl/cuda/portable_tokens.hpp"

// ---- The optimal token baseline (algorithms/optimal_token_baseline.hpp) ---------------------

#include "cascade_rl/algorithms/optimal_token_baseline.hpp"
#include "cascade_rl/terms/optimal_token_baseline.hpp"

namespace cascade_rl::cuda::portable {
namespace detail {

// One sequence: returns, W, the valid count, the ranks' tokens (terms::otb_sequence).
template <class T>
struct otb_sequence_functor {
  const T *rewards, *old_log_probs, *sum_pi_squared, *rho;
  device_token_layout layout;
  T *advantages, *returns;
  double* cumulative;
  std::size_t *counts, *compacted;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    terms::otb_sequence(terms::otb_rows{layout.offsets, layout.mask}, s, layout.begin(s),
                        layout.end(s), rewards, old_log_probs, sum_pi_squared, rho, returns,
                        advantages, cumulative, counts, compacted);
  }
};

// One group: the baselines position by position (terms::otb_group).
template <class T>
struct otb_group_functor {
  device_group_layout groups;
  device_token_layout layout;
  const std::size_t *counts, *compacted;
  const T* returns;
  const double* cumulative;
  T* advantages;
  double epsilon;
  bool handle_zero_tail;
  CASCADE_RL_HD void operator()(std::size_t g) const {
    terms::otb_group(terms::otb_rows{layout.offsets, layout.mask}, groups.begin(g), groups.end(g),
                     counts, compacted, returns, cumulative, advantages, epsilon, handle_zero_tail);
  }
};

}  // namespace detail

// Advantages (0 on masked tokens) and returns (every token); rollout_is_weights null: none.
// Scratch: cumulative one double per token, counts one per sequence, positions one per
// token under options.multi_turn (else unused, may be null). Inputs are not validated.
template <class ExecPolicy, class T>
void optimal_token_baseline_advantages(ExecPolicy&& exec, const T* token_rewards,
                                       const T* old_log_probs, const T* sum_pi_squared,
                                       const T* rollout_is_weights,
                                       const device_group_layout& groups,
                                       const device_token_layout& layout, T* advantages, T* returns,
                                       const optimal_token_baseline_options& options,
                                       double* cumulative, std::size_t* counts,
                                       std::size_t* positions) {
  std::size_t* const compacted = options.multi_turn ? positions : nullptr;
  detail::for_each_index(exec, layout.sequences,
                         detail::otb_sequence_functor<T>{
                             token_rewards, old_log_probs, sum_pi_squared, rollout_is_weights,
                             layout, advantages, returns, cumulative, counts, compacted});
  detail::for_each_index(
      exec, groups.groups,
      detail::otb_group_functor<T>{groups, layout, counts, compacted, returns, cumulative,
                                   advantages, options.epsilon, options.handle_zero_tail});
}

}  // namespace cascade_rl::cuda::portable

// ---- the sequence-level ratio losses (algorithms/sequence_ratio_losses.hpp) ----------

#include "cascade_rl/cuda/detail/sequence_ratio_terms.hpp"

namespace cascade_rl::cuda::portable {

namespace detail {

// out[s] = the mean log-ratio of sequence s (terms::sequence_mean_log_ratio, the host's
// order), one work item per sequence.
template <class T>
struct sequence_log_ratio_functor {
  device_token_layout layout;
  const T* log_probs;
  const T* old_log_probs;
  double* out;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    out[s] = terms::sequence_mean_log_ratio(log_probs, old_log_probs, layout.mask, layout.begin(s),
                                            layout.end(s));
  }
};

}  // namespace detail

// GSPO: `sequence_scratch` holds layout.sequences doubles (the pre-pass's means);
// rollout_is_weights may be null (no weights).
template <class ExecPolicy, class T>
void gspo_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
               const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
               T* grad_out, const loss_normalizer& normalizer, const gspo_options& options,
               double* sequence_scratch, loss_tally* scratch) {
  detail::for_each_index(
      exec, layout.sequences,
      detail::sequence_log_ratio_functor<T>{layout, log_probs, old_log_probs, sequence_scratch});
  const detail::gspo_term<T> term{log_probs,
                                  old_log_probs,
                                  advantages,
                                  rollout_is_weights,
                                  sequence_scratch,
                                  layout,
                                  options};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

namespace detail {

// out[s] = the loss of sequence s (terms::geo_mean_sequence_loss, the host's order).
template <class T>
struct geo_mean_sequence_functor {
  device_token_layout layout;
  const T* log_probs;
  const T* old_log_probs;
  const T* advantages;
  const T* rollout_is_weights;
  geo_mean_options params;
  double* out;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    out[s] = terms::geo_mean_sequence_loss(log_probs, old_log_probs, advantages, rollout_is_weights,
                                           layout.mask, layout.begin(s), layout.end(s), params);
  }
};

}  // namespace detail

// GMPO: `sequence_scratch` holds layout.sequences doubles (the pre-pass's row losses);
// rollout_is_weights may be null (no weights).
template <class ExecPolicy, class T>
void geo_mean_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                   const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
                   T* grad_out, const loss_normalizer& normalizer, const geo_mean_options& options,
                   double* sequence_scratch, loss_tally* scratch) {
  detail::for_each_index(
      exec, layout.sequences,
      detail::geo_mean_sequence_functor<T>{layout, log_probs, old_log_probs, advantages,
                                           rollout_is_weights, options, sequence_scratch});
  const detail::geo_mean_term<T> term{
      log_probs, old_log_probs, advantages, rollout_is_weights, sequence_scratch, layout, options};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

}  // namespace cascade_rl::cuda::portable

// ---- covariance-selection losses (Clip-Cov) --------------------------------------------

#include <thrust/sort.h>

#include "cascade_rl/cuda/detail/covariance_terms.hpp"

namespace cascade_rl::cuda::portable {

// Entries of the double scratch clip_cov_seeded_selection needs for `tokens` tokens.
[[nodiscard]] inline std::size_t covariance_sum_scratch(std::size_t tokens) {
  return cascade_rl::cuda::detail::covariance_sum_entries(tokens);
}

namespace detail {

// Both selections' steps (detail/covariance_terms.hpp): zero the mask, canonical block
// sums and their totals, keys_of(totals) per token, a stable sort by key (so the order is
// (key, index)), then the first selection_count(ratio, valid) keyed tokens marked.
template <class ExecPolicy, class T, class KeysOf>
void covariance_selection(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                          const T* advantages, double ratio, std::uint8_t* selected, double* sums,
                          std::uint64_t* keys, std::size_t* indices, const KeysOf& keys_of) {
  const std::size_t n = layout.tokens;
  if (n == 0) return;
  thrust::fill_n(exec, selected, n, std::uint8_t{0});
  const std::size_t blocks =
      (n + cascade_rl::detail::reduce_block_size - 1) / cascade_rl::detail::reduce_block_size;
  for_each_index(exec, blocks,
                 covariance_block_sums_functor<T>{layout, advantages, log_probs, sums});
  for_each_index(exec, 1, covariance_combine_functor{sums, blocks});
  const double* totals = sums + 3 * blocks;
  for_each_index(exec, n, keys_of(totals));
  thrust::stable_sort_by_key(exec, keys, keys + n, indices);
  for_each_index(exec, n, mark_selected_functor{keys, indices, totals, ratio, selected});
}

}  // namespace detail

// Our seeded Clip-Cov draw (token_selection::seeded of the host core, same tokens):
// selected[t] = 1 on the selected tokens, 0 elsewhere. Scratch, in the system's memory:
// sums (covariance_sum_scratch(tokens) doubles), keys and indices (one per token). Every
// token is sorted by its key (non-candidates last), stably, so the order is (key, index).
template <class ExecPolicy, class T>
void clip_cov_seeded_selection(ExecPolicy&& exec, const device_token_layout& layout,
                               const T* log_probs, const T* old_log_probs, const T* advantages,
                               std::uint64_t seed, const clip_cov_options& options,
                               std::uint8_t* selected, double* sums, std::uint64_t* keys,
                               std::size_t* indices) {
  detail::covariance_selection(exec, layout, log_probs, advantages, options.clip_cov_ratio,
                               selected, sums, keys, indices, [&](const double* totals) {
                                 return detail::clip_cov_keys_functor<T>{
                                     layout, log_probs, old_log_probs, advantages, totals,
                                     seed,   options,   keys,          indices};
                               });
}

// Clip-Cov over a selection mask (one byte per token, non-zero: selected), as
// cascade_rl::clip_cov_loss with that selection; rollout_is_weights may be null.
template <class ExecPolicy, class T>
void clip_cov_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                   const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
                   const std::uint8_t* selected, T* grad_out, const loss_normalizer& normalizer,
                   const clip_cov_options& options, loss_tally* scratch) {
  const detail::clip_cov_term<T> term{
      log_probs,
      old_log_probs,
      advantages,
      rollout_is_weights,
      selected,
      options};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

}  // namespace cascade_rl::cuda::portable

// ---- KL-Cov -------------------------------------------------------------------------------

namespace cascade_rl::cuda::portable {

// KL-Cov's selection (kl_cov_selection of the host core, same tokens): selected[t] = 1 on
// the k valid tokens of largest cov (ties to the smaller index), 0 elsewhere. Scratch as
// clip_cov_seeded_selection's.
template <class ExecPolicy, class T>
void kl_cov_selection(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                      const T* advantages, const kl_cov_options& options, std::uint8_t* selected,
                      double* sums, std::uint64_t* keys, std::size_t* indices) {
  detail::covariance_selection(exec, layout, log_probs, advantages, options.kl_cov_ratio, selected,
                               sums, keys, indices, [&](const double* totals) {
                                 return detail::kl_cov_keys_functor<T>{
                                     layout, log_probs, advantages, totals, keys, indices};
                               });
}

// KL-Cov over a selection mask (one byte per token, non-zero: the KL penalty applies), as
// cascade_rl::kl_cov_loss with that selection; rollout_is_weights may be null.
template <class ExecPolicy, class T>
void kl_cov_loss(ExecPolicy&& exec, const device_token_layout& layout, const T* log_probs,
                 const T* old_log_probs, const T* advantages, const T* rollout_is_weights,
                 const std::uint8_t* selected, T* grad_out, const loss_normalizer& normalizer,
                 const kl_cov_options& options, loss_tally* scratch) {
  const detail::kl_cov_term<T> term{log_probs,          old_log_probs, advantages,
                                    rollout_is_weights, selected,      options.ppo_kl_coef};
  detail::reduce_tokens(exec, layout, term, grad_out, options.aggregation, normalizer, scratch);
}

}  // namespace cascade_rl::cuda::portable

// ---- the rollout correction (algorithms/rollout_correction.hpp) ------------------------

#include "cascade_rl/algorithms/rollout_correction_metrics.hpp"
#include "cascade_rl/cuda/detail/rollout_correction_terms.hpp"

namespace cascade_rl::cuda::portable {

// The scratch of rollout_correction_passes: rows (doubles), block sums and block extremes
// (doubles) for `tokens` tokens, and one std::size_t per token (row_of).
[[nodiscard]] inline std::size_t rollout_row_scratch(std::size_t rows) {
  return cascade_rl::detail::rollout_row_scratch(rows);
}
[[nodiscard]] inline std::size_t rollout_blocks(std::size_t tokens) {
  return (tokens + cascade_rl::detail::reduce_block_size - 1) /
         cascade_rl::detail::reduce_block_size;
}
[[nodiscard]] inline std::size_t rollout_block_sum_scratch(std::size_t tokens) {
  return rollout_blocks(tokens) * terms::rollout_channels;
}
[[nodiscard]] inline std::size_t rollout_block_extreme_scratch(std::size_t tokens) {
  return rollout_blocks(tokens) * terms::rollout_extremes;
}

// The rollout correction's passes on the device: weights (the applied ones, not yet
// batch-normalised; null when options.is_level is none) and keep bytes, and the scratch
// rollout_correction_finish reads. Inputs are not validated (the host path does that).
template <class ExecPolicy, class T>
void rollout_correction_passes(ExecPolicy&& exec, const device_token_layout& layout,
                               const T* log_probs, const T* rollout_log_probs,
                               const rollout_correction_options& options, T* weights,
                               std::uint8_t* keep, double* row, std::size_t* row_of,
                               double* block_sums, double* block_extremes) {
  const terms::rollout_correction_params p = cascade_rl::detail::rollout_params_of(options);
  T* const w = options.is_level == rollout_is_level::none ? nullptr : weights;
  detail::for_each_index(
      exec, layout.sequences,
      detail::rollout_prepass_functor<T>{p, layout, log_probs, rollout_log_probs, row});
  detail::for_each_index(exec, layout.sequences,
                         detail::rollout_tokens_functor<T>{p, layout, log_probs, rollout_log_probs,
                                                           row, 1.0, w, keep, row_of});
  detail::for_each_index(exec, rollout_blocks(layout.tokens),
                         detail::rollout_block_functor<T>{p, layout, log_probs, rollout_log_probs,
                                                          row, row_of, block_sums, block_extremes});
}

// The metrics from host copies of the passes' row scratch, block sums and block extremes
// (the block sums added in block order, as the host does); `factor` receives the batch
// normalisation's divisor, 1 when none (then rollout_correction_normalize).
inline rollout_correction_metrics rollout_correction_finish(
    const rollout_correction_options& options, const double* row, std::size_t rows,
    const double* block_sums, const double* block_extremes, std::size_t tokens, double& factor) {
  double totals[terms::rollout_channels] = {};
  double extremes[terms::rollout_extremes];
  for (int c = 0; c < terms::rollout_extremes; c += 2) {
    extremes[c] = -INFINITY;
    extremes[c + 1] = INFINITY;
  }
  for (std::size_t b = 0; b < rollout_blocks(tokens); ++b) {
    for (int c = 0; c < terms::rollout_channels; ++c)
      totals[c] += block_sums[b * terms::rollout_channels + static_cast<std::size_t>(c)];
    terms::rollout_join_extremes(extremes, block_extremes + b * terms::rollout_extremes);
  }
  return cascade_rl::detail::finish_rollout_correction(
      options, cascade_rl::detail::rollout_params_of(options), row, rows, totals, extremes, factor);
}

// Divides the weights by `factor` (rollout_correction_finish's), recomputing them from
// the inputs as the host does.
template <class ExecPolicy, class T>
void rollout_correction_normalize(ExecPolicy&& exec, const device_token_layout& layout,
                                  const T* log_probs, const T* rollout_log_probs,
                                  const rollout_correction_options& options, double factor,
                                  T* weights, std::uint8_t* keep, double* row,
                                  std::size_t* row_of) {
  const terms::rollout_correction_params p = cascade_rl::detail::rollout_params_of(options);
  detail::for_each_index(exec, layout.sequences,
                         detail::rollout_tokens_functor<T>{p, layout, log_probs, rollout_log_probs,
                                                           row, factor, weights, keep, row_of});
}

}  // namespace cascade_rl::cuda::portable

// ---- the bypass mode (algorithms/rollout_correction.hpp's bypass_mode_loss) ---------------

#include <thrust/device_ptr.h>

#include <vector>

#include "cascade_rl/algorithms/rollout_correction.hpp"

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
