#pragma once
// The portable Thrust path's plumbing, shared by every operation in portable/: the
// includes they all need, for_each_index (one Thrust work item per index), the token
// helpers (count_indices, reduce_blocks, valid_tokens_of, fill_valid_tokens), the loops
// of the per-sequence and per-group operations (for_each_sequence, for_each_group) and a
// group's moments as the host core computes them.
// portable.hpp says what the portable path is.

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
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
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/detail/token_terms.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/options/kl.hpp"
#include "cascade_rl/options/loss_normalizer.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/group_moments.hpp"

namespace cascade_rl::cuda::portable {

using detail::loss_tally;

namespace detail {

using namespace cascade_rl::cuda::detail;

template <class ExecPolicy, class F>
void for_each_index(ExecPolicy&& exec, std::size_t n, F f) {
  if (n == 0) return;
  thrust::for_each_n(exec, thrust::counting_iterator<std::size_t>(0), n, f);
}

// How many indices i of [0, n) satisfy pred(i) (an integer count: the same in any order).
template <class ExecPolicy, class Predicate>
unsigned long long count_indices(ExecPolicy&& exec, std::size_t n, Predicate pred) {
  if (n == 0) return 0;
  const thrust::counting_iterator<std::size_t> index(0);
  return static_cast<unsigned long long>(thrust::count_if(exec, index, index + n, pred));
}

// Blocks of cascade_rl::detail::reduce_block_size tokens that cover `tokens` tokens: the
// work items of every canonical token sum (whitening, the token losses, the selections).
CASCADE_RL_HD constexpr std::size_t reduce_blocks(std::size_t tokens) {
  return (tokens + cascade_rl::detail::reduce_block_size - 1) /
         cascade_rl::detail::reduce_block_size;
}

// The valid tokens of sequence s.
CASCADE_RL_HD inline std::size_t valid_tokens_of(const device_token_layout& layout, std::size_t s) {
  std::size_t n = 0;
  for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) n += layout.valid(t) ? 1 : 0;
  return n;
}

// out[t] = value on the valid tokens of sequence s, 0 on its masked ones.
template <class T>
CASCADE_RL_HD void fill_valid_tokens(const device_token_layout& layout, std::size_t s, T value,
                                     T* out) {
  for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
    out[t] = layout.valid(t) ? value : T(0);
}

// The work item of for_each_sequence: sequence s handed to the rule.
template <class Rule>
struct per_sequence_functor {
  device_token_layout layout;
  Rule rule;
  CASCADE_RL_HD void operator()(std::size_t s) const { rule(layout, s); }
};

// The loop of the per-sequence operations (broadcasts, returns, GAE, ReMax, the
// sequence pre-passes): one Thrust work item per sequence runs rule(layout, s), which
// walks the tokens [layout.begin(s), layout.end(s)) in the host core's order. The rule is
// a plain struct with a CASCADE_RL_HD operator() (not a lambda: nvcc would need
// --extended-lambda for a device lambda); it holds only what is particular to its
// operation (arrays, options): the layout and the sequence come with the call.
template <class ExecPolicy, class Rule>
void for_each_sequence(ExecPolicy&& exec, const device_token_layout& layout, const Rule& rule) {
  for_each_index(exec, layout.sequences, per_sequence_functor<Rule>{layout, rule});
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

// One group as a per-group estimator's rule sees it: its index, its sequences
// [first, last) and the batch's scores (indexed by sequence).
template <class T>
struct scored_group {
  const T* scores;
  std::size_t index;
  std::size_t first;
  std::size_t last;

  // The host core's moments of the group's scores (sequential_moments).
  CASCADE_RL_HD group_moments moments(mean_accumulation accumulation) const {
    return sequential_moments(scores, first, last, accumulation);
  }
  // Whether a score of the group is NaN or infinite.
  CASCADE_RL_HD bool has_nonfinite() const {
    bool nonfinite = false;
    for (std::size_t s = first; s < last; ++s)
      nonfinite = nonfinite || !::cuda::std::isfinite(scores[s]);
    return nonfinite;
  }
};

// The work item of for_each_group: group g handed to the rule.
template <class T, class Rule>
struct per_group_functor {
  const T* scores;
  device_group_layout groups;
  Rule rule;
  CASCADE_RL_HD void operator()(std::size_t g) const {
    rule(scored_group<T>{scores, g, groups.begin(g), groups.end(g)});
  }
};

// The loop of the per-group estimators (GRPO, RLOO, GPG, pass@k, OPO, ...), the
// counterpart of the host core's detail::for_each_group: one Thrust work item per group runs
// rule(scored_group<T>), which writes that group's outputs sequentially, in the host's
// order. The rule is a plain struct, as for for_each_sequence: the group's range and
// scores come with the call.
template <class ExecPolicy, class T, class Rule>
void for_each_group(ExecPolicy&& exec, const T* scores, const device_group_layout& groups,
                    const Rule& rule) {
  for_each_index(exec, groups.groups, per_group_functor<T, Rule>{scores, groups, rule});
}

}  // namespace detail

}  // namespace cascade_rl::cuda::portable
