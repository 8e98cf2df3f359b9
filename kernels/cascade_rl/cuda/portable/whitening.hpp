#pragma once
// Batch whitening over the valid tokens on the portable path, in the host core's order
// (detail::blocked_sum of parallel.hpp, the canonical order of canonical_sum.hpp): one
// Thrust work item per block of reduce_block_size tokens, the block sums added in block
// order by a single work item; under the CPP and OMP systems the host core's bits for
// any thread count. A batch of one valid token under the unbiased whitening throws
// cascade_rl::error with the host core's message.

#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/cuda/portable/common.hpp"

namespace cascade_rl::cuda::portable::detail {

struct is_valid_token {
  device_token_layout layout;
  CASCADE_RL_HD bool operator()(std::size_t t) const { return layout.valid(t); }
};

// One block of blocked_sum: the valid values (or their squared deviations from
// state[0], the mean) summed in the canonical order (canonical_sum.hpp); masked tokens
// add 0.0 as there.
template <class T, bool Squares>
struct whiten_block_functor {
  device_token_layout layout;
  const T* values;
  double* scratch;  // block sums, then the mean and the inverse scale
  mean_accumulation accumulation;
  CASCADE_RL_HD void operator()(std::size_t b) const {
    const std::size_t first = b * cascade_rl::detail::reduce_block_size;
    const std::size_t last = min_of(first + cascade_rl::detail::reduce_block_size, layout.tokens);
    const std::size_t blocks = reduce_blocks(layout.tokens);
    scratch[b] = cascade_rl::detail::canonical_block_sum(first, last, [&](std::size_t t) {
      if (!layout.valid(t)) return 0.0;
      if constexpr (Squares) {
        const double d = terms::deviation(values[t], scratch[blocks], accumulation);
        return d * d;
      } else {
        return static_cast<double>(values[t]);
      }
    });
  }
};

// The block sums added in block order from 0.0, then the mean (Squares false, into
// scratch[blocks]) or the inverse scale (Squares true, into scratch[blocks + 1]).
template <bool Squares>
struct whiten_total_functor {
  double* scratch;
  std::size_t blocks;
  unsigned long long count;
  whitening_options p;
  CASCADE_RL_HD void operator()(std::size_t) const {
    double total = 0.0;
    for (std::size_t b = 0; b < blocks; ++b) total += scratch[b];
    if constexpr (Squares)
      scratch[blocks + 1] = terms::whitening_inv_scale(total, count, p.estimator, p.epsilon);
    else
      scratch[blocks] = terms::whitening_mean(total, count, p.accumulation);
  }
};

template <class T>
struct whiten_apply_functor {
  device_token_layout layout;
  const T* values;
  T* out;
  const double* state;  // mean, inverse scale
  whitening_options p;
  CASCADE_RL_HD void operator()(std::size_t t) const {
    out[t] = layout.valid(t) ? terms::whitened(values[t], state[0], state[1], p.accumulation, p.shift_mean)
                             : T(0);
  }
};

template <class T>
struct zero_functor {
  T* out;
  CASCADE_RL_HD void operator()(std::size_t t) const { out[t] = T(0); }
};

// detail::whiten_valid_tokens of the host core; values and out may be the same array.
template <class ExecPolicy, class T>
void whiten(ExecPolicy&& exec, const T* values, const device_token_layout& layout, T* out,
            const whitening_options& options, double* scratch) {
  const std::size_t n = layout.tokens;
  const unsigned long long count = count_indices(exec, n, is_valid_token{layout});
  if (count == 0) {
    for_each_index(exec, n, zero_functor<T>{out});
    return;
  }
  if (options.estimator == std_estimator::unbiased && count < 2)
    cascade_rl::detail::fail("tokens",
                             "has 1 valid token, but whitening with the unbiased variance needs at least 2");
  const whitening_options& p = options;
  const std::size_t blocks = reduce_blocks(n);
  for_each_index(exec, blocks, whiten_block_functor<T, false>{layout, values, scratch, p.accumulation});
  for_each_index(exec, 1, whiten_total_functor<false>{scratch, blocks, count, p});
  for_each_index(exec, blocks, whiten_block_functor<T, true>{layout, values, scratch, p.accumulation});
  for_each_index(exec, 1, whiten_total_functor<true>{scratch, blocks, count, p});
  for_each_index(exec, n, whiten_apply_functor<T>{layout, values, out, scratch + blocks, p});
}

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

// Doubles of scratch a whitening over `tokens` tokens needs.
[[nodiscard]] inline std::size_t whitening_scratch(std::size_t tokens) {
  return detail::reduce_blocks(tokens) + 2;
}

// Batch whitening over the valid tokens, 0 on masked tokens; whitened may be values.
template <class ExecPolicy, class T>
void masked_whiten(ExecPolicy&& exec, const T* values, const device_token_layout& layout,
                   T* whitened, const whitening_options& options, double* scratch) {
  cascade_rl::detail::require_whitening_options(options);
  detail::whiten(exec, values, layout, whitened, options, scratch);
}

}  // namespace cascade_rl::cuda::portable
